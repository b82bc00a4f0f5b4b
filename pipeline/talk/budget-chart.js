// The per-turn latency budget as an SVG bar chart: one row per stage (measured time over its
// allotment) and a last row for the perceived latency against the budget line (600 ms).
"use strict";

(() => {
  const NS = "http://www.w3.org/2000/svg";
  const W = 560, LABEL = 100, VALUE = 110, ROW = 18, TOP = 22;
  const BAR = W - LABEL - VALUE;

  function el(name, attrs, parent, text) {
    const node = document.createElementNS(NS, name);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
    if (text !== undefined) node.textContent = text;
    if (parent) parent.appendChild(node);
    return node;
  }

  const fmt = (ms) => (ms === null || ms === undefined ? "n/a" : `${Math.round(ms)} ms`);

  function render(svg, budget) {
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    const stages = Array.isArray(budget.stages) ? budget.stages : [];
    const limit = Number(budget.budget_ms) || 600;
    const perceived = typeof budget.perceived_ms === "number" ? budget.perceived_ms : null;
    const values = [limit, perceived || 0];
    for (const s of stages) values.push(s.ms || 0, s.allotment_ms || 0);
    // One scale for every turn up to twice the budget, so the budget line stays put as turns stack up.
    const scale = BAR / Math.max(2 * limit, 1.1 * Math.max(...values));
    const height = TOP + ROW * (stages.length + 1) + 16;
    svg.setAttribute("viewBox", `0 0 ${W} ${height}`);
    svg.setAttribute("width", W);
    svg.setAttribute("height", height);
    const verdict = perceived === null ? "not measured" : perceived <= limit ? "within budget" : "over budget";
    el("text", { x: 0, y: 13, class: "title" }, svg,
      `Turn ${budget.turn}: perceived ${fmt(perceived)} / ${Math.round(limit)} ms (${verdict})`);
    stages.forEach((s, i) => {
      const y = TOP + ROW * i;
      el("text", { x: 0, y: y + 12 }, svg, s.name);
      el("rect", { x: LABEL, y: y + 2, width: (s.allotment_ms || 0) * scale, height: ROW - 4, class: "allot" }, svg);
      el("rect", { x: LABEL, y: y + 5, width: (s.ms || 0) * scale, height: ROW - 10,
        class: "bar-stage" + (s.overrun ? " over" : "") }, svg);
      el("text", { x: LABEL + BAR + 6, y: y + 12 }, svg, `${fmt(s.ms)} / ${Math.round(s.allotment_ms || 0)}`);
    });
    const y = TOP + ROW * stages.length;
    el("text", { x: 0, y: y + 12, class: "title" }, svg, "perceived");
    el("rect", { x: LABEL, y: y + 2, width: (perceived || 0) * scale, height: ROW - 4,
      class: "bar-perceived" + (perceived !== null && perceived > limit ? " over" : "") }, svg);
    el("text", { x: LABEL + BAR + 6, y: y + 12 }, svg, `${fmt(perceived)} / ${Math.round(limit)}`);
    const lx = LABEL + limit * scale;
    el("line", { x1: lx, x2: lx, y1: TOP - 2, y2: height - 14, class: "limit" }, svg);
    el("text", { x: lx - 18, y: height - 3 }, svg, `${Math.round(limit)} ms`);
  }

  window.ParleyBudgetChart = { render, NS };
})();
