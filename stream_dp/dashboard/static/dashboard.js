// stream-dp dashboard: draws /api/* as HTML, CSS bars and small SVG lines; refreshes on Server-Sent Events.
// No libraries, no network beyond this server: works offline. Bars and lines are placed in percentages of
// their box, so they fit any card at any screen size; wall mode (?wall=1, automatic from 1920 px wide)
// only changes the type size and how many rows each card shows.
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg";
const WALL_FROM_PX = 1920;
const PRIMARY_ORDER = ["histogram", "topk", "watch_topk", "argmax"];  // the ranking shown large: counts first
const ROWS = { wall: { ranking: 10, bars: 5, timeline: 28, periods: 7 },
               page: { ranking: 15, bars: 10, timeline: 42, periods: 7 } };
const WALL_RANKING_ALONE = 14;  // wall mode without alerts and samples: the ranking has the whole left side
const HISTORY_WINDOWS = 12;
const SPARK_RANKS = 20;  // the rank lines' scale: ranks 1..20 (lower ranks on the bottom edge)

function h(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined) continue;
    if (k === "class") node.className = v; else if (k === "style") node.style.cssText = v; else node.setAttribute(k, v);
  }
  for (const c of children.flat()) if (c !== null && c !== undefined) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return node;
}

function s(tag, attrs, ...children) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) if (v !== null && v !== undefined) node.setAttribute(k, v);
  for (const c of children.flat()) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return node;
}

// ---- numbers: ε and δ as stream_dp/budget_text.py writes them (tail, demo, `budget show`) -----------
function fmtEps(x) {
  if (x === Infinity) return "∞";
  if (x === null || x === undefined || !isFinite(x)) return "–";
  if (x > 0 && x < 0.005) return "<0.01";
  return x.toFixed(2);
}

function fmtDelta(x) {
  if (x === null || x === undefined || !isFinite(x)) return "–";
  if (x === 0) return "0";
  const [mantissa, exponent] = x.toExponential(1).split("e");
  const e = Number(exponent);
  return `${mantissa}e${e < 0 ? "-" : "+"}${String(Math.abs(e)).padStart(2, "0")}`;
}

function num(x) {
  if (x === null || x === undefined || !isFinite(x)) return "–";
  const a = Math.abs(x);
  if (a !== 0 && (a < 1e-3 || a >= 1e7)) return x.toExponential(2);
  return Number(a >= 1000 ? Math.round(x) : x.toPrecision(3)).toLocaleString("en");
}

function pct(v, max) {
  return `${(100 * Math.min(1, Math.max(0, v / (max || 1)))).toFixed(2)}%`;
}

function when(epoch) {
  return new Date(epoch * 1000).toISOString().slice(0, 16).replace("T", " ");
}

function windowLabel(w) {
  // compact: a UTC day is its date; a window within one day is "date hh:mm–hh:mm UTC"
  if (!w) return "";
  const a = when(w.start), b = when(w.end), midnight = t => t % 86400 === 0;
  if (midnight(w.start) && midnight(w.end)) return w.end - w.start === 86400 ? a.slice(0, 10) : `${a.slice(0, 10)} → ${when(w.end - 86400).slice(5, 10)}`;
  if (a.slice(0, 10) === b.slice(0, 10) || (midnight(w.end) && w.end - w.start < 86400)) return `${a}–${b.slice(11)} UTC`;
  return `${a} → ${b.slice(5)} UTC`;
}

function duration(seconds) {
  const a = Math.abs(seconds);
  return a < 60 ? `${Math.round(a)} s` : a < 3600 ? `${Math.round(a / 60)} min`
    : a < 172800 ? `${(a / 3600).toFixed(a < 36000 ? 1 : 0)} h` : `${Math.round(a / 86400)} days`;
}

function closedAgo(end) {
  // how old the newest window is, by this browser's clock (a replayed future ends "in" some time)
  const age = Date.now() / 1000 - end;
  return age >= 0 ? `closed ${duration(age)} ago` : `ends in ${duration(age)} by this clock`;
}

function titled(id, text) {
  // a heading's text, whole on hover when the heading is too narrow for it
  const node = document.getElementById(id);
  node.textContent = text;
  const heading = node.closest("h2");
  if (heading) heading.title = heading.textContent.replace(/\s+/g, " ").trim();
}

function replace(id, ...nodes) {
  const box = document.getElementById(id);
  box.replaceChildren(...nodes);
  return box;
}

let wall = false;
function chooseMode() {
  const asked = new URLSearchParams(location.search).get("wall");
  const next = asked === "1" ? true : asked === "0" ? false : window.innerWidth >= WALL_FROM_PX;
  document.body.classList.toggle("wall", next);
  const changed = next !== wall;
  wall = next;
  return changed;
}
const rows = () => ROWS[wall ? "wall" : "page"];

// ---- the ranking, with rank changes, counts and each key's rank history -------------------------
function changeMarker(item, compared) {
  if (item.new) return h("span", { class: "change new", title: "never released before" }, "new");
  if (item.change === null) return h("span", { class: "change back", title: "not in the previous window; released earlier" }, "back");
  const since = compared ? ` since ${when(compared.start)}` : "";
  if (item.change > 0) return h("span", { class: "change up", title: `up ${item.change}${since}` }, `▲${item.change}`);
  if (item.change < 0) return h("span", { class: "change down", title: `down ${-item.change}${since}` }, `▼${-item.change}`);
  return h("span", { class: "change same", title: `same place${since}` }, "=");
}

function sparkline(history, worst) {
  // rank 1 at the top; a window where the key was not released breaks the line
  const n = history.length, top = Math.max(worst, 2);
  const svg = s("svg", { class: "spark", viewBox: `0 0 ${Math.max(n - 1, 1)} ${top - 1}`, preserveAspectRatio: "none",
                         role: "img", "aria-label": "rank in each of the last windows" });
  svg.append(s("line", { class: "guide", x1: 0, x2: Math.max(n - 1, 1), y1: 0, y2: 0, "vector-effect": "non-scaling-stroke" }));
  let run = [];
  const flush = () => {
    if (run.length > 1) svg.append(s("polyline", { points: run.join(" "), "vector-effect": "non-scaling-stroke" }));
    run = [];
  };
  const y = rank => Math.min(rank, top) - 1;
  history.forEach((rank, i) => { if (rank === null || rank === undefined) flush(); else run.push(`${i},${y(rank)}`); });
  flush();
  const last = history[n - 1];
  if (last !== null && last !== undefined) {
    svg.append(s("line", { class: "now", x1: n - 1, x2: n - 1, y1: y(last), y2: y(last), "vector-effect": "non-scaling-stroke" }));
  }
  return svg;
}

function intervalTrack(value, interval, max) {
  const track = h("div", { class: "track" }, h("div", { class: "fill", style: `width:${pct(value, max)}` }));
  if (interval && interval.lower !== null && interval.upper !== null) {
    const lo = Math.max(0, interval.lower), hi = Math.max(lo, interval.upper);
    track.append(h("div", { class: "whisker", style: `left:${pct(lo, max)};width:calc(${pct(hi, max)} - ${pct(lo, max)})` }));
  }
  return track;
}

// a release over a public domain: each key tracked (a key of the window's domain) or discovered (found outside it)
function sourceTag(item) {
  return item.tracked ? h("span", { class: "tag tracked", title: "tracked: a key of the window's public domain" }, "tracked")
    : h("span", { class: "tag discovered", title: "discovered: found outside the window's public domain" }, "discovered");
}

function domainLine(domain, shown, tagged) {
  // one line: the domain's size and provenance, every detail of the record's domain block on hover; when the
  // keys shown are all tracked (or all discovered) the line says so instead of a column of identical tags
  const learned = domain.from_released, configured = domain.static, added = domain.size - configured;
  const parts = [`${num(domain.size)} key${domain.size === 1 ? "" : "s"}`];
  if (configured) parts.push(learned ? `${num(configured)} from the config` : "from the config");
  if (learned) parts.push(`${configured ? `${num(added)} ` : ""}learned from what ${learned.types.join(", ")}`
    + ` published in the last ${learned.memory_windows} window${learned.memory_windows === 1 ? "" : "s"}`);
  const tracked = shown.filter(i => i.tracked === true).length, found = shown.filter(i => i.tracked === false).length;
  const counted = `${tracked} tracked, ${found} discovered`;
  if (!tagged && shown.length) parts.push(tracked === shown.length ? "every key shown tracked" : found === shown.length ? "every key shown discovered" : counted);
  const title = `this release's public domain: ${domain.size} keys (${configured} from the config's domain and domain_file`
    + (learned ? `; ${learned.keys} learned, of ${learned.candidates} that ${learned.types.join(", ")} published in the windows`
      + ` ${learned.windows.map(when).join(" – ") || "(none yet)"}, by ${learned.order}, at most ${learned.max_keys}; digest ${learned.digest}` : "")
    + `). Keys shown: ${counted}.`;
  return h("p", { class: "domain-line one-line", id: "domain-line", title }, h("b", {}, "domain "), parts.join(" · "));
}

function primaryOf(rankings) {
  const rank = t => (PRIMARY_ORDER.includes(t) ? PRIMARY_ORDER.indexOf(t) : PRIMARY_ORDER.length);
  return rankings.slice().sort((a, b) => rank(a.type) - rank(b.type))[0];
}

function mechanismName(r) {
  const m = (r.mechanism && r.mechanism.name) || r.type;
  return { limited_domain_topk: "limited-domain top-k", gaussian_histogram: "histogram",
           laplace_histogram: "histogram (Laplace)", weighted_histogram: "histogram (weighted)" }[m] || m;
}

function renderRanking(trending) {
  if (!trending.rankings.length) return;
  const r = primaryOf(trending.rankings);
  titled("trending-title", r.type === "histogram" ? "Top keys by count" : "Top keys");
  titled("trending-window", `· ${windowLabel(r.window)} · ${mechanismName(r)}` + (r.compared_with ? "" : " · first window"));
  const box = document.getElementById("ranking");
  if (r.status === "budget_exhausted") {
    box.replaceChildren(h("p", { class: "exhausted" }, "not released: the period's privacy budget cannot cover it"));
    box.dataset.keys = "";
    renderOtherRankings(trending.rankings.filter(x => x !== r));
    return;
  }
  const alone = wall && document.body.classList.contains("no-alerts") && document.body.classList.contains("no-sample");
  // on a wall (one screen, no scrolling) the domain's line takes the place of one row
  const items = r.items.slice(0, (alone ? WALL_RANKING_ALONE : rows().ranking) - (wall && r.domain ? 1 : 0));
  const valued = items.some(i => i.value !== null && i.value !== undefined);
  const max = Math.max(0, ...items.map(i => (i.interval && i.interval.upper) || i.value || 0)) * 1.04;
  // the lines span ranks 1..SPARK_RANKS at most: a rank further down is drawn on the bottom edge (a long
  // histogram would otherwise squash every line into the top)
  const floor = Math.max(items.length, SPARK_RANKS);
  const worst = Math.min(floor, Math.max(items.length, ...items.flatMap(i => i.history.filter(x => x !== null))));
  // a tag per key only when the keys shown differ (a catalogue's ranking is all tracked: the domain's line says so)
  const tagged = new Set(items.filter(i => i.tracked !== undefined).map(i => i.tracked)).size > 1;
  const cols = [h("col", { class: "c-rank" }), h("col", { class: "c-change" }), h("col", { class: "c-key" })];
  if (tagged) cols.push(h("col", { class: "c-source" }));
  if (valued) cols.push(h("col", { class: "c-value" }), h("col", { class: "c-bar" }));
  cols.push(h("col", { class: "c-history" }));
  const more = r.items.length > items.length ? ` · top ${items.length} of ${r.items.length} released` : "";
  const head = h("tr", {}, h("th", {}, "#"), h("th", {}, ""), h("th", { title: `key${more}` }, `key${more}`),
    tagged ? h("th", { title: "tracked: in the window's public domain; discovered: found outside it" }, "") : [],
    valued ? [h("th", { class: "num" }, r.type === "histogram" ? "count" : "estimate"), h("th", {}, "")] : [],
    h("th", {}, `rank, last ${r.history_windows.length}`));
  const body = items.map(i => {
    const pm = i.interval && i.interval.lower !== null && i.interval.upper !== null
      ? Math.round((i.interval.upper - i.interval.lower) / 2) : null;
    const what = i.interval ? `noisy count ${num(i.value)}, interval ${num(i.interval.lower)} – ${num(i.interval.upper)}`
      : `estimate ${num(i.value)}`;
    return h("tr", { class: "ranked", "data-key": i.key },
      h("td", { class: "rank" }, i.rank), h("td", {}, changeMarker(i, r.compared_with)),
      h("td", { class: "key", title: i.key }, i.key),
      tagged ? h("td", { class: "source" }, i.tracked === undefined ? "" : sourceTag(i)) : [],
      valued ? [h("td", { class: "value", title: what }, num(i.value), pm !== null ? h("span", { class: "pm" }, `±${pm}`) : null),
                h("td", { class: "bar", title: what }, intervalTrack(i.value || 0, i.interval, max))] : [],
      h("td", { class: "history", title: `rank in the last ${i.history.length} windows: ${i.history.map(x => x ?? "–").join(", ")}` },
        sparkline(i.history, worst)));
  });
  const span = cols.length - 2;
  if (r.hit_bottom) {
    const say = r.items.length ? "stopped early: the next key was not clearly above the rest"
      : "stopped at ⊥ before any key: nothing was clearly above the rest";
    body.push(h("tr", { class: "bottom-marker", title: "the next key was not clearly above the rest" },
      h("td", { class: "rank" }, "⊥"), h("td", {}, ""), h("td", { class: "say", colspan: span, title: say }, say)));
  } else if (!r.items.length) {
    body.push(h("tr", {}, h("td", { colspan: cols.length, class: "muted" }, "no key cleared the threshold in this window")));
  }
  box.replaceChildren(r.domain ? domainLine(r.domain, items, tagged) : "",
    h("table", { class: "ranking" }, h("colgroup", {}, cols), h("thead", {}, head), h("tbody", {}, body)));
  box.dataset.keys = r.items.map(i => i.key).join("\n");
  renderOtherRankings(trending.rankings.filter(x => x !== r));
  renderRising(r);
}

function renderOtherRankings(others) {
  replace("other-rankings", ...others.map(r => {
    const keys = r.status === "budget_exhausted" ? "not released (budget exhausted)"
      : r.items.map(i => `${i.rank} ${i.key}`).join(" · ") + (r.hit_bottom ? " · ⊥" : "") || "no keys";
    return h("p", { class: "other-ranking one-line", title: keys, "data-type": r.type },
      h("b", {}, `${mechanismName(r)}: `), keys);
  }));
}

function renderRising(r) {
  titled("rising-window", r.compared_with ? `· since ${when(r.compared_with.start).slice(0, 10)}` : "");
  if (!r.compared_with) { replace("rising", h("p", { class: "muted" }, "needs two released windows")); return; }
  if (!r.rising.length) { replace("rising", h("p", { class: "muted" }, "no key climbed since the previous window")); return; }
  const cells = r.rising.flatMap(x => {
    const where = x.from_rank === null ? `entered at #${x.rank}` : `#${x.from_rank} → #${x.rank}`;
    const change = x.value_change !== null ? ` · ${x.value_change >= 0 ? "+" : ""}${num(x.value_change)}` : "";
    return [h("span", { class: "climb" }, `▲${x.climb}`), h("span", { class: "key", title: x.key, "data-key": x.key }, x.key),
            h("span", { class: "where" }, where + change)];
  });
  replace("rising", h("div", { class: "rising" }, cells));
}

// ---- alerts: estimate and lower confidence bound as error bars --------------------------------
function showCard(id, shown, flag) {
  // a card with nothing to show is left out, and the grid closes the gap (body.no-alerts / body.no-sample)
  document.getElementById(id).hidden = !shown;
  document.body.classList.toggle(flag, !shown);
}

function renderAlerts(record) {
  showCard("alerts-card", !!record, "no-alerts");
  if (!record) return;
  titled("alerts-window", `· ${windowLabel(record.window)}`);
  if (record.status === "budget_exhausted") {
    replace("alerts", h("p", { class: "exhausted" }, "not released: the period's privacy budget cannot cover it"));
    return;
  }
  const above = record.items.filter(i => i.above && i.estimate !== null && i.estimate !== undefined)
    .sort((a, b) => b.estimate - a.estimate);
  const below = record.items.filter(i => !i.above);
  const params = (record.mechanism && record.mechanism.parameters) || {};
  const threshold = params.threshold ?? null, conf = params.confidence ?? null;
  const nodes = [h("p", { class: "one-line summary" }, `${above.length} of ${record.items.length} watched keys above the threshold`
    + (threshold !== null ? ` ${num(threshold)}` : "") + (conf ? ` · ${Math.round(conf * 100)}% lower bounds` : ""))];
  if (above.length) {
    const shown = above.slice(0, rows().bars);
    const max = Math.max(threshold ?? 0, ...shown.map(i => i.estimate)) * 1.04;
    const chart = h("div", { class: "rows", id: "alerts-chart", role: "img", "aria-label": "alerts: estimates with lower confidence bounds" });
    for (const i of shown) {
      const lb = Math.max(0, i.lower_bound ?? i.estimate);
      const track = h("div", { class: "track error-bar", "data-key": i.key, title: `${i.key}: estimate ${num(i.estimate)}, lower bound ${num(lb)}` },
        h("div", { class: "range", style: `left:${pct(lb, max)};width:calc(${pct(i.estimate, max)} - ${pct(lb, max)})` }),
        h("div", { class: "cap", style: `left:${pct(lb, max)}` }),
        h("div", { class: "dot", style: `left:${pct(i.estimate, max)}` }));
      if (threshold !== null) track.append(h("div", { class: "threshold", style: `left:${pct(threshold, max)}`, title: `threshold ${num(threshold)}` }));
      chart.append(h("div", { class: "label", title: i.key }, i.key), track,
                   h("div", { class: "value" }, num(i.estimate), h("span", { class: "muted" }, ` ≥ ${num(lb)}`)));
    }
    nodes.push(chart);
    if (above.length > shown.length) nodes.push(h("p", { class: "muted one-line" }, `… ${above.length - shown.length} more above`));
  }
  if (below.length) {
    const names = below.map(i => i.key).join(", ");
    nodes.push(h("p", { class: "muted one-line below", title: names }, `below: ${names}`));
  }
  replace("alerts", ...nodes);
}

// ---- sample estimates --------------------------------------------------------------------------
function renderEstimates(record) {
  showCard("estimates-card", !!record, "no-sample");
  if (!record) return;
  titled("estimates-title", record.type === "sample" ? "Sample estimates" : "Estimates");
  titled("estimates-window", `· ${windowLabel(record.window)}`);
  if (record.status === "budget_exhausted") {
    replace("estimates", h("p", { class: "exhausted" }, "not released: the period's privacy budget cannot cover it"));
    return;
  }
  const items = record.items.map(i => ({ ...i, estimate: i.estimate ?? i.count }))
    .filter(i => i.estimate !== null && i.estimate !== undefined)
    .sort((a, b) => b.estimate - a.estimate);
  if (!items.length) { replace("estimates", h("p", { class: "muted" }, "no keys in this release")); return; }
  const shown = items.slice(0, rows().bars);
  const iv = i => (i.ci_low !== undefined ? { lower: i.ci_low, upper: i.ci_high } : null);
  const max = Math.max(...shown.map(i => (iv(i) && iv(i).upper) || i.estimate)) * 1.04;
  const chart = h("div", { class: "rows", id: "estimates-chart", role: "img", "aria-label": "estimates" });
  for (const i of shown) {
    chart.append(h("div", { class: "label", title: i.key }, i.key),
      h("div", { class: "estimate-bar", "data-key": i.key, title: `${i.key}: estimate ${num(i.estimate)}` }, intervalTrack(i.estimate, iv(i), max)),
      h("div", { class: "value" }, num(i.estimate)));
  }
  const total = items.reduce((a, i) => a + i.estimate, 0);
  replace("estimates", h("p", { class: "one-line summary" }, `${items.length} sampled keys · estimated total ${num(total)}`), chart,
    items.length > shown.length ? h("p", { class: "muted one-line" }, `… ${items.length - shown.length} more`) : "");
}

// ---- the budget at a glance: the current period's ε left, its burn-down, the periods before ------
function burnDown(p) {
  const pts = p.points.filter(q => q.epsilon_remaining !== null);
  // a margin M around the plot, so the first and last charge's dot are drawn whole
  const n = Math.max(pts.length, 2), cap = p.epsilon_cap || 1, W = 100, H = 30, M = 2;
  const x = i => M + (W - 2 * M) * i / (n - 1), y = v => M + (H - 2 * M) * (1 - Math.max(0, Math.min(v, cap)) / cap);
  const svg = s("svg", { class: "burn", id: "budget-chart", viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: "none", role: "img",
                         "aria-label": `ε left after each release in ${p.scope}`, "data-scope": p.scope });
  let d = `M ${x(0)} ${y(cap)}`;
  pts.forEach((q, i) => { d += ` H ${x(i)} V ${y(q.epsilon_remaining)}`; });
  svg.append(s("line", { class: "axis", x1: x(0), x2: x(n - 1), y1: y(0), y2: y(0), "vector-effect": "non-scaling-stroke" }),
             s("path", { class: "burn-area", d: d + ` H ${x(n - 1)} V ${y(0)} H ${x(0)} Z` }),
             s("path", { class: "burn", d, "vector-effect": "non-scaling-stroke" }));
  pts.forEach((q, i) => svg.append(s("line", { class: `charge ${q.status}`, x1: x(i), x2: x(i), y1: y(q.epsilon_remaining),
    y2: y(q.epsilon_remaining), "vector-effect": "non-scaling-stroke" },
    s("title", {}, `${q.type} of ${when(q.window_start).slice(0, 10)}: ${q.status.replace("_", " ")} · cost ε ${fmtEps(q.cost_epsilon)}`
      + ` · spent ε ${fmtEps(q.epsilon_spent)}, ${fmtEps(q.epsilon_remaining)} left`))));
  return svg;
}

function meter(spent, cap) {
  const share = Math.min(1, Math.max(0, spent / (cap || 1)));
  return h("div", { class: "meter" }, h("div", { class: `used${share > 0.8 ? " high" : ""}`, style: `width:${(100 * share).toFixed(1)}%` }));
}

function renderBudget(budget) {
  if (!budget.periods.length) return;
  const [p, ...before] = budget.periods;
  titled("budget-scope", `· period ${p.scope}`);
  const nodes = [
    h("div", { class: "headline" }, h("span", { class: "big", id: "epsilon-left" }, fmtEps(p.epsilon_remaining)),
      h("span", { class: "of" }, `ε left of ${fmtEps(p.epsilon_cap)}`)),
    meter(p.epsilon_spent, p.epsilon_cap),
    h("p", { class: "muted one-line" }, `spent ε ${fmtEps(p.epsilon_spent)} in ${p.releases} release${p.releases === 1 ? "" : "s"}`
      + ` · δ ${fmtDelta(p.delta_spent)} of ${fmtDelta(p.delta_cap)}` + (p.budget_exhausted ? ` · ${p.budget_exhausted} refused` : ""))];
  if (p.points.length > 1) nodes.push(burnDown(p));  // one release per period: the meter says it all
  if (before.length) {
    const shown = before.slice(0, rows().periods).reverse();  // oldest left, like the timeline
    nodes.push(h("div", { class: "periods", title: "earlier periods: ε spent of the cap" }, shown.map(q =>
      h("div", { class: "period", "data-scope": q.scope, title: `${q.scope}: ε ${fmtEps(q.epsilon_spent)} spent of ${fmtEps(q.epsilon_cap)}`
        + (q.budget_exhausted ? `, ${q.budget_exhausted} refused` : "") },
        h("div", { class: "name" }, q.scope.length === 10 ? q.scope.slice(5) : q.scope), meter(q.epsilon_spent, q.epsilon_cap),
        h("div", { class: "spent" }, `ε ${fmtEps(q.epsilon_spent)}`)))));
  }
  replace("budget", ...nodes);
}

// ---- window timeline ---------------------------------------------------------------------------
function renderTimeline(timeline) {
  const windows = timeline.windows.slice(0, rows().timeline).reverse();  // oldest left
  if (!windows.length) return;
  const types = [...new Set(windows.flatMap(w => Object.keys(w.types)))];
  titled("timeline-range",
    `· ${windows.length} window${windows.length > 1 ? "s" : ""}, ${when(windows[0].start).slice(5, 10)} → ${when(windows[windows.length - 1].end - 1).slice(5, 10)}`);
  const grid = h("div", { class: "timeline", id: "timeline-chart", style: `grid-template-columns: auto repeat(${windows.length}, minmax(0, 1fr))` });
  for (const t of types) {
    grid.append(h("div", { class: "type" }, t));
    for (const w of windows) {
      const status = w.types[t];
      grid.append(h("div", { class: status ? `cell ${status}` : "cell", "data-window": w.start, "data-type": t,
                             title: `${t} · ${windowLabel(w)}: ${status ? status.replace("_", " ") : "no record"}` }));
    }
  }
  replace("timeline", grid);
}

function renderFreshness(timeline) {
  const newest = timeline.windows[0];
  const box = document.getElementById("fresh");
  if (!newest) return;
  box.replaceChildren("newest window ", h("b", {}, windowLabel(newest)), ` · ${closedAgo(newest.end)}`);
  box.dataset.windowEnd = String(newest.end);
}

// ---- loading and live updates ----------------------------------------------------------------
async function getJSON(path) {
  const resp = await fetch(path, { cache: "no-store" });
  if (!resp.ok && resp.status !== 503) throw new Error(`${path}: HTTP ${resp.status}`);
  return resp.json();
}

let live = false, last = null;
function draw() {
  if (!last) return;
  const { trending, budget, timeline, alerts, sample } = last;
  renderAlerts(alerts.releases[0] || null);
  renderEstimates(sample.releases[0] || null);
  renderRanking(trending);
  renderBudget(budget);
  renderTimeline(timeline);
  renderFreshness(timeline);
}

async function refresh() {
  const [trending, budget, timeline, alerts, sample, health] = await Promise.all([
    getJSON(`/api/trending?windows=${HISTORY_WINDOWS}`), getJSON("/api/budget"), getJSON("/api/timeline?limit=60"),
    getJSON("/api/releases?type=alerts&limit=1"), getJSON("/api/releases?type=sample&limit=1"), getJSON("/healthz")]);
  last = { trending, budget, timeline, alerts, sample };
  draw();
  const status = document.getElementById("status");
  status.className = "status " + (health.status === "ok" ? "live" : "down");
  status.textContent = `${health.records} releases · ${health.status === "ok" ? (live ? "live" : "reading") : health.status}`;
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

chooseMode();
window.addEventListener("resize", () => { if (chooseMode()) draw(); });
setInterval(() => { if (last) renderFreshness(last.timeline); }, 30000);
refresh().catch(showError);
connect();
