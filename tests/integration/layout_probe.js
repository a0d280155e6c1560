// Measures the dashboard's layout in the page (evaluated by tests/integration/test_dashboard_layout.py).
// For every visible element inside a visible card (.card):
//   outside -- the element reaches beyond its card's rectangle (drawn over the page, or making it scroll);
//   clipped -- the element is cut off by an ancestor inside the card that clips (an <svg>, or CSS overflow
//              other than visible): e.g. a bar's value label drawn past the edge of its chart.
// Plus the page's horizontal scroll (document width beyond the viewport). One entry per offending element:
// which card, a short description, and by how many CSS pixels it sticks out.
(() => {
  const TOLERANCE = 1;  // sub-pixel rounding
  const describe = el => {
    const cls = typeof el.className === "string" ? el.className : (el.className && el.className.baseVal) || "";
    const text = (el.textContent || "").trim().replace(/\s+/g, " ").slice(0, 40);
    return `${el.tagName.toLowerCase()}${el.id ? "#" + el.id : ""}${cls ? "." + cls.trim().split(/\s+/).join(".") : ""}`
      + (text ? ` "${text}"` : "");
  };
  const visible = el => {
    if (el.closest("title, defs, clipPath, mask")) return false;
    const style = getComputedStyle(el);
    if (style.display === "none" || style.visibility === "hidden" || Number(style.opacity) === 0) return false;
    const r = el.getBoundingClientRect();
    return r.width > 0 || r.height > 0;
  };
  const clips = el => el instanceof SVGSVGElement
    || (!(el instanceof SVGElement) && getComputedStyle(el).overflowX !== "visible")
    || (!(el instanceof SVGElement) && getComputedStyle(el).overflowY !== "visible");
  const beyond = (inner, outer) => Math.max(outer.left - inner.left, inner.right - outer.right,
                                            outer.top - inner.top, inner.bottom - outer.bottom);
  const outside = [], clipped = [];
  const cards = [...document.querySelectorAll(".card")].filter(visible);
  const viewport = { left: 0, top: -1e9, right: document.documentElement.clientWidth, bottom: 1e9 };
  for (const card of cards) {
    const c = card.getBoundingClientRect();
    const cardOut = beyond(c, viewport);
    if (cardOut > TOLERANCE) outside.push({ card: card.id, element: "the card itself", px: Math.round(cardOut) });
    for (const el of card.querySelectorAll("*")) {
      if (!visible(el)) continue;
      const r = el.getBoundingClientRect();
      const over = beyond(r, c);
      if (over > TOLERANCE) outside.push({ card: card.id, element: describe(el), px: Math.round(over) });
      for (let a = el.parentElement; a && a !== card; a = a.parentElement) {
        if (!clips(a)) continue;
        if (getComputedStyle(a).textOverflow === "ellipsis" && a.title) break;  // truncated on purpose, full text on hover
        const cut = beyond(r, a.getBoundingClientRect());
        if (cut > TOLERANCE) clipped.push({ card: card.id, element: describe(el), px: Math.round(cut) });
        break;
      }
    }
  }
  const root = document.documentElement;
  return {
    viewport: [innerWidth, innerHeight],
    horizontal_scroll_px: Math.max(0, root.scrollWidth - root.clientWidth),
    vertical_scroll_px: Math.max(0, root.scrollHeight - root.clientHeight),
    cards: cards.length,
    outside, clipped,
  };
})()
