// stream-dp dashboard: draws /api/* as HTML and hand-written SVG; refreshes on Server-Sent Events.
// No libraries, no network beyond this server: works offline.
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg";
const TYPE_COLORS = { topk: "#2f5fd0", alerts: "#b7791f", sample: "#0f8a4b", histogram: "#7b3fbf",
                      argmax: "#555", watch_topk: "#888" };

function h(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined) continue;
    if (k === "class") node.className = v; else node.setAttribute(k, v);
  }
  for (const c of children.flat()) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return node;
}

function s(tag, attrs, ...children) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) if (v !== null && v !== undefined) node.setAttribute(k, v);
  for (const c of children.flat()) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return node;
}

function when(epoch) {
  return new Date(epoch * 1000).toISOString().slice(0, 16).replace("T", " ");
}

function windowLabel(w) {
  return w ? `${when(w.start)} → ${when(w.end)} UTC` : "";
}

function num(x, digits = 3) {
  if (x === null || x === undefined || !isFinite(x)) return "–";
  const a = Math.abs(x);
  if (a !== 0 && (a < 1e-3 || a >= 1e6)) return x.toExponential(2);
  return Number(x.toPrecision(digits)).toLocaleString("en");
}

function replace(id, ...nodes) {
  const box = document.getElementById(id);
  box.replaceChildren(...nodes);
  return box;
}

// ---- ranking ---------------------------------------------------------------------------------
function changeMarker(item, compared) {
  if (item.new) return h("span", { class: "change new", title: "never released before" }, "new");
  if (item.change === null) return h("span", { class: "change back", title: "not in the previous window; released earlier" }, "back");
  const since = compared ? ` since ${when(compared.start)}` : "";
  if (item.change > 0) return h("span", { class: "change up", title: `up ${item.change}${since}` }, `▲${item.change}`);
  if (item.change < 0) return h("span", { class: "change down", title: `down ${-item.change}${since}` }, `▼${-item.change}`);
  return h("span", { class: "change same", title: `same place${since}` }, "=");
}

function intervalCell(item, max) {
  if (item.estimate === undefined || item.estimate === null) return h("td", {});
  const W = 160, x = v => 4 + (W - 8) * Math.max(0, v) / (max || 1);
  const g = s("svg", { width: W, height: 14, class: "estimate" },
    s("rect", { class: "bar", x: 4, y: 3, height: 8, width: Math.max(1, x(item.estimate) - 4) }));
  if (item.interval) {
    const lo = item.interval.lower ?? item.estimate, hi = item.interval.upper ?? item.estimate;
    g.append(s("line", { class: "whisker", x1: x(lo), x2: x(hi), y1: 7, y2: 7 }),
             s("line", { class: "whisker", x1: x(lo), x2: x(lo), y1: 3, y2: 11 }),
             s("line", { class: "whisker", x1: x(hi), x2: x(hi), y1: 3, y2: 11 }));
  }
  return h("td", { title: item.interval ? `estimate ${num(item.estimate)}, interval ${num(item.interval.lower)} – ${num(item.interval.upper)}` : `estimate ${num(item.estimate)}` }, g);
}

// a release with a public domain: which keys it tracked (in the domain) and which it newly discovered
function sourceTag(item) {
  if (item.tracked === undefined) return "";
  return item.tracked ? h("span", { class: "tag tracked", title: "in the window's domain: tracked" }, "tracked")
                      : h("span", { class: "tag discovered", title: "found outside the window's domain" }, "discovered");
}

function domainLine(domain) {
  const learned = domain.from_released;
  return h("p", { class: "explain domain-line" }, `domain: ${domain.size} key(s)`
    + (domain.static ? `, ${domain.static} from the config` : "")
    + (learned ? `, ${learned.keys} learned from what ${learned.types.join(", ")} published in the last `
      + `${learned.memory_windows} window(s)` : ""));
}

function renderRanking(trending) {
  const box = document.getElementById("ranking");
  document.getElementById("trending-window").textContent = windowLabel(trending.window);
  if (!trending.rankings.length) return;
  const parts = [], keys = [];
  for (const r of trending.rankings) {
    parts.push(h("h3", {}, `${r.type} · ${windowLabel(r.window)}`,
      h("span", { class: "muted" }, r.compared_with ? ` · compared with ${when(r.compared_with.start)}` : " · first window")));
    if (r.status === "budget_exhausted") {
      parts.push(h("p", { class: "exhausted" }, "not released: the period's privacy budget cannot cover it"));
      continue;
    }
    if (r.domain) parts.push(domainLine(r.domain));
    const max = Math.max(0, ...r.items.map(i => (i.interval && i.interval.upper) || i.estimate || 0));
    const rows = r.items.map(i => {
      keys.push(i.key);
      return h("tr", { class: "ranked", "data-key": i.key },
        h("td", { class: "rank" }, i.rank), h("td", {}, changeMarker(i, r.compared_with)),
        h("td", { class: "key" }, i.key, sourceTag(i)), intervalCell(i, max));
    });
    if (r.hit_bottom) {
      rows.push(h("tr", { class: "bottom-marker", title: "the next key was not clearly above the rest" },
        h("td", { class: "rank" }, "⊥"), h("td", {}, ""),
        h("td", { colspan: 2 }, r.items.length ? "stopped early: the next key was not clearly above the rest"
                                                : "stopped at ⊥ before any key: nothing was clearly above the rest")));
    }
    parts.push(h("table", { class: "ranking" }, h("tbody", {}, rows)));
  }
  box.replaceChildren(...parts);
  box.dataset.keys = keys.join("\n");
}

// ---- alerts: estimate and lower confidence bound as error bars --------------------------------
function renderAlerts(record) {
  if (!record) return;
  document.getElementById("alerts-window").textContent = windowLabel(record.window);
  if (record.status === "budget_exhausted") {
    replace("alerts", h("p", { class: "exhausted" }, "not released: the period's privacy budget cannot cover it"));
    return;
  }
  const above = record.items.filter(i => i.above && i.estimate !== null && i.estimate !== undefined);
  const below = record.items.filter(i => !i.above);
  const threshold = record.mechanism && record.mechanism.parameters ? record.mechanism.parameters.threshold : null;
  const nodes = [];
  if (above.length) {
    const lows = above.map(i => (i.lower_bound ?? i.estimate));
    const lo = Math.min(threshold ?? Infinity, ...lows) * 0.9, hi = Math.max(...above.map(i => i.estimate)) * 1.05;
    const L = 170, W = 600, row = 20, H = above.length * row + 24;
    const x = v => L + (W - L - 90) * (v - lo) / ((hi - lo) || 1);
    const g = s("svg", { id: "alerts-chart", width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: "img",
                         "aria-label": "alerts: estimates with lower confidence bounds" });
    above.forEach((i, n) => {
      const y = 12 + n * row, lb = i.lower_bound ?? i.estimate;
      g.append(s("text", { x: L - 8, y: y + 4, "text-anchor": "end" }, i.key.length > 26 ? i.key.slice(0, 25) + "…" : i.key),
        s("g", { class: "error-bar", "data-key": i.key },
          s("title", {}, `${i.key}: estimate ${num(i.estimate)}, lower bound ${num(lb)}`),
          s("line", { class: "range", x1: x(lb), x2: x(i.estimate), y1: y, y2: y }),
          s("line", { class: "cap", x1: x(lb), x2: x(lb), y1: y - 6, y2: y + 6 }),
          s("circle", { cx: x(i.estimate), cy: y, r: 4 })),
        s("text", { x: x(i.estimate) + 8, y: y + 4, class: "muted-text" }, `${num(i.estimate)} (≥ ${num(lb)})`));
    });
    if (threshold !== null && threshold !== undefined) {
      g.append(s("line", { class: "threshold", x1: x(threshold), x2: x(threshold), y1: 2, y2: H - 16 }),
               s("text", { x: x(threshold), y: H - 4, "text-anchor": "middle", class: "muted-text" }, `threshold ${num(threshold)}`));
    }
    nodes.push(g);
  }
  const conf = record.mechanism && record.mechanism.parameters ? record.mechanism.parameters.confidence : null;
  nodes.push(h("p", { class: "muted" }, `${above.length} of ${record.items.length} watched keys above the threshold`
    + (conf ? `; bounds at ${conf * 100}% confidence` : "")
    + (below.length ? `; below: ${below.map(i => i.key).slice(0, 8).join(", ")}${below.length > 8 ? " …" : ""}` : "")));
  replace("alerts", ...nodes);
}

// ---- sample / histogram estimates -----------------------------------------------------------
function renderEstimates(record) {
  if (!record) return;
  document.getElementById("estimates-window").textContent = `${record.type} · ${windowLabel(record.window)}`;
  if (record.status === "budget_exhausted") {
    replace("estimates", h("p", { class: "exhausted" }, "not released: the period's privacy budget cannot cover it"));
    return;
  }
  // sample items carry an estimate; histogram items a noisy count with ci_low / ci_high
  const items = record.items.map(i => ({ ...i, estimate: i.estimate ?? i.count }))
    .filter(i => i.estimate !== null && i.estimate !== undefined)
    .sort((a, b) => b.estimate - a.estimate).slice(0, 12);
  if (!items.length) { replace("estimates", h("p", { class: "muted" }, "no keys in this release")); return; }
  const iv = i => Array.isArray(i.interval) ? { lower: i.interval[0], upper: i.interval[1] }
    : (i.interval ? { lower: i.interval.lower ?? i.interval.low, upper: i.interval.upper ?? i.interval.high }
      : (i.ci_low !== undefined ? { lower: i.ci_low, upper: i.ci_high } : null));
  const max = Math.max(...items.map(i => (iv(i) && iv(i).upper) || i.estimate)) * 1.05;
  const L = 170, W = 520, row = 18, H = items.length * row + 8;
  const x = v => L + (W - L - 40) * Math.max(0, v) / (max || 1);
  const g = s("svg", { id: "estimates-chart", width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: "img" });
  items.forEach((i, n) => {
    const y = 4 + n * row, bar = s("g", { class: "estimate-bar", "data-key": i.key },
      s("title", {}, `${i.key}: estimate ${num(i.estimate)}`),
      s("rect", { class: "bar", x: L, y: y + 2, height: row - 6, width: Math.max(1, x(i.estimate) - L) }));
    const r = iv(i);
    if (r) {
      const lo = r.lower ?? i.estimate, hi = r.upper ?? i.estimate, m = y + row / 2 - 1;
      bar.setAttribute("class", "estimate-bar error-bar");
      bar.append(s("line", { class: "whisker", x1: x(lo), x2: x(hi), y1: m, y2: m }),
                 s("line", { class: "whisker", x1: x(lo), x2: x(lo), y1: m - 5, y2: m + 5 }),
                 s("line", { class: "whisker", x1: x(hi), x2: x(hi), y1: m - 5, y2: m + 5 }));
    }
    g.append(s("text", { x: L - 8, y: y + row / 2 + 2, "text-anchor": "end" }, i.key.length > 26 ? i.key.slice(0, 25) + "…" : i.key),
             bar, s("text", { x: x(r && r.upper ? r.upper : i.estimate) + 4, y: y + row / 2 + 2, class: "muted-text" }, num(i.estimate)));
  });
  replace("estimates", g);
}

// ---- budget burn-down ------------------------------------------------------------------------
function renderBudget(budget) {
  if (!budget.periods.length) return;
  const nodes = [];
  for (const p of budget.periods.slice(0, 4)) {
    const W = 520, H = 150, L = 40, B = 22, T = 10, R = 10;
    const pts = p.points.filter(q => q.epsilon_remaining !== null);
    const n = Math.max(pts.length, 2), cap = p.epsilon_cap || 1;
    const x = i => L + (W - L - R) * i / (n - 1 || 1), y = v => T + (H - T - B) * (1 - Math.max(0, v) / cap);
    const g = s("svg", { class: "budget-chart", id: nodes.length ? null : "budget-chart", width: W, height: H,
                         viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": `budget ${p.scope}`, "data-scope": p.scope });
    g.append(s("line", { class: "axis", x1: L, x2: L, y1: T, y2: H - B }), s("line", { class: "axis", x1: L, x2: W - R, y1: H - B, y2: H - B }),
             s("line", { class: "cap-line", x1: L, x2: W - R, y1: y(cap), y2: y(cap) }),
             s("text", { x: L - 4, y: y(cap) + 4, "text-anchor": "end", class: "muted-text" }, num(cap)),
             s("text", { x: L - 4, y: y(0) + 4, "text-anchor": "end", class: "muted-text" }, "0"),
             s("text", { x: L, y: H - 6, class: "muted-text" }, "releases in charge order →"));
    let d = `M ${x(0)} ${y(cap)}`;
    pts.forEach((q, i) => { d += ` H ${x(i)} V ${y(q.epsilon_remaining)}`; });
    g.append(s("path", { class: "burn-area", d: d + ` V ${y(0)} H ${x(0)} Z` }), s("path", { class: "burn", d }));
    pts.forEach((q, i) => g.append(s("circle", { class: `charge ${q.status}`, cx: x(i), cy: y(q.epsilon_remaining), r: 3,
      fill: q.status === "released" ? TYPE_COLORS[q.type] || "#2f5fd0" : null },
      s("title", {}, `${q.type} of ${when(q.window_start)}: ${q.status}, ε ${num(q.epsilon_spent)} spent, ${num(q.epsilon_remaining)} left`))));
    nodes.push(h("h3", {}, `period ${p.scope}`, h("span", { class: "muted" },
      ` · ε ${num(p.epsilon_spent)} spent of ${num(cap)}, ${num(p.epsilon_remaining)} left · δ ${num(p.delta_spent)} of ${num(p.delta_cap)}`
      + (p.budget_exhausted ? ` · ${p.budget_exhausted} refused` : ""))), g);
  }
  replace("budget", ...nodes);
}

// ---- window timeline -------------------------------------------------------------------------
function renderTimeline(timeline) {
  const windows = timeline.windows.slice().reverse();  // oldest left
  if (!windows.length) return;
  const types = [...new Set(windows.flatMap(w => Object.keys(w.types)))];
  const C = 18, L = 70, W = Math.max(L + windows.length * (C + 4) + 10, 460), H = types.length * (C + 4) + 34;
  const g = s("svg", { id: "timeline-chart", width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: "img" });
  types.forEach((t, r) => g.append(s("text", { x: L - 6, y: 14 + r * (C + 4), "text-anchor": "end" }, t)));
  windows.forEach((w, c) => {
    types.forEach((t, r) => {
      const status = w.types[t];
      if (!status) return;
      g.append(s("rect", { class: `cell ${status}`, x: L + c * (C + 4), y: 2 + r * (C + 4), width: C, height: C, rx: 3,
        "data-window": w.start, "data-type": t }, s("title", {}, `${t} · ${windowLabel(w)}: ${status.replace("_", " ")}`)));
    });
  });
  g.append(s("text", { x: L, y: H - 8, class: "muted-text" },
             `${windows.length} window${windows.length > 1 ? "s" : ""}: ${when(windows[0].start)} → ${when(windows[windows.length - 1].end)} UTC, oldest left`));
  replace("timeline", g);
}

// ---- loading and live updates ----------------------------------------------------------------
async function getJSON(path) {
  const resp = await fetch(path, { cache: "no-store" });
  if (!resp.ok && resp.status !== 503) throw new Error(`${path}: HTTP ${resp.status}`);
  return resp.json();
}

function latestOf(releases, types) {
  return releases.find(r => types.includes(r.type)) || null;
}

let live = false;
async function refresh() {
  const [trending, budget, timeline, recent, health] = await Promise.all([
    getJSON("/api/trending"), getJSON("/api/budget"), getJSON("/api/timeline?limit=60"),
    getJSON("/api/releases?limit=300"), getJSON("/healthz")]);
  renderRanking(trending);
  renderAlerts(latestOf(recent.releases, ["alerts"]));
  const hist = latestOf(recent.releases, ["histogram"]);
  renderEstimates(hist && (!latestOf(recent.releases, ["sample"]) || hist.window.start >= latestOf(recent.releases, ["sample"]).window.start)
    ? hist : latestOf(recent.releases, ["sample"]));
  renderBudget(budget);
  renderTimeline(timeline);
  const status = document.getElementById("status");
  status.className = "status " + (live && health.status === "ok" ? "live" : "down");
  status.textContent = `${health.records} releases · ${health.status === "ok" ? (live ? "live" : "reconnecting") : health.status}`
    + ` · updated ${new Date().toISOString().slice(11, 19)} UTC`;
  const banner = document.getElementById("rejected");
  banner.hidden = !health.rejected;
  if (health.rejected) banner.textContent = `${health.rejected} message(s) on the releases topic were refused and are not shown; the last: ${health.last_rejection}`;
  document.body.dataset.records = String(health.records);
  if (health.status !== "ok") setTimeout(scheduleRefresh, 2000);  // not reading the topic yet: look again
}

let timer = null;
function scheduleRefresh() {
  if (timer) return;
  timer = setTimeout(() => { timer = null; refresh().catch(showError); }, 250);
}

function showError(err) {
  const status = document.getElementById("status");
  status.className = "status down";
  status.textContent = `offline: ${err.message}`;
  setTimeout(scheduleRefresh, 5000);
}

function connect() {
  const source = new EventSource("/api/stream");
  source.addEventListener("hello", () => { live = true; scheduleRefresh(); });
  source.addEventListener("release", scheduleRefresh);
  source.addEventListener("reload", scheduleRefresh);
  source.onerror = () => { live = false; scheduleRefresh(); };  // EventSource reconnects by itself
}

refresh().catch(showError);
connect();
