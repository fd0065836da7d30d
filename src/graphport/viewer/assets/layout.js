// graphport viewer layout: a layered (Sugiyama-style) top-to-bottom layout of nested blocks.
//
// Each expanded module is a block laid out on its own, bottom-up, and then placed as one
// rectangle among its siblings, so module boxes nest but never overlap. Inside a block:
// items get layers by longest path in data-flow order (an edge that would go back, between
// two modules that call into each other, is left out of the layering); edges that span
// layers get dummy points so they route between boxes; rows are ordered by barycenters
// (a few sweeps down and up) and x positions are the closest to the neighbours' mean that
// keep the row's order and gaps (an isotonic regression, solved by pooling adjacent
// violators).
"use strict";
const graphportLayout = (function () {
  const GAP_X = 26, GAP_DUMMY = 12, GAP_Y = 34, PAD = 12, HEADER = 24;

  // items: Map key -> {key, parent, w, h, first}; blocks are items too, with `block: true`
  // (their w and h are computed here). parent is a block's key or "root".
  // edges: [{from, to}] between leaf items. Returns the items with ax (centre x), ay (top)
  // set, and each edge with `points` (absolute polyline, from the bottom of `from` to the top of `to`).
  function layout(items, edges) {
    const children = new Map([["root", []]]);
    for (const it of items.values()) {
      if (it.block) children.set(it.key, children.get(it.key) || []);
      if (!children.has(it.parent)) children.set(it.parent, []);
      children.get(it.parent).push(it);
    }
    const ancestry = key => {   // the item's blocks, outermost first, then the item
      const path = [];
      for (let k = key; k !== "root"; k = items.get(k).parent) path.push(k);
      return path.reverse();
    };
    // each edge is lifted to the block where its two ends' branches meet
    const blockEdges = new Map();   // block key -> Map "a|b" -> {a, b, dummies}
    for (const e of edges) {
      const pa = ancestry(e.from), pb = ancestry(e.to);
      let p = 0;
      while (pa[p] === pb[p]) p++;
      e.block = p ? pa[p - 1] : "root";
      e.a = pa[p]; e.b = pb[p];
      if (!blockEdges.has(e.block)) blockEdges.set(e.block, new Map());
      const m = blockEdges.get(e.block), k = e.a + "|" + e.b;
      if (!m.has(k)) m.set(k, { a: e.a, b: e.b, dummies: [] });
      e.lifted = m.get(k);
    }
    const root = { key: "root", block: true, w: 0, h: 0 };
    const order = [];   // blocks, children before parents
    (function visit(b) {
      for (const c of children.get(b.key)) if (c.block) visit(c);
      order.push(b);
    })(root);
    const rows = new Map();
    for (const b of order) rows.set(b.key, layoutBlock(b, children.get(b.key), blockEdges.get(b.key) || new Map(), items));
    place(root, 0, 0, children, rows);
    for (const e of edges) {
      const from = items.get(e.from), to = items.get(e.to);
      const points = [[from.ax, from.ay + from.h]];
      for (const d of e.lifted.dummies) points.push([d.ax, d.ay], [d.ax, d.ay + d.rowH]);
      points.push([to.ax, to.ay]);
      e.points = points;
    }
    return { root, edges };
  }

  function layoutBlock(block, members, lifted, items) {
    const byKey = new Map(members.map(m => [m.key, m]));
    members.sort((a, b) => a.first - b.first);
    for (const m of members) { m.preds = []; m.succs = []; m.layer = 0; }
    const forward = [];
    for (const e of lifted.values()) {
      const a = byKey.get(e.a), b = byKey.get(e.b);
      if (a.first < b.first) forward.push([a, b, e]);
    }
    for (const [a, b] of forward) { a.succs.push(b); b.preds.push(a); }
    for (const m of members) for (const p of m.preds) m.layer = Math.max(m.layer, p.layer + 1);
    // a weight (an item with no inputs) sits in the row just above its first user
    for (const m of members) {
      if (!m.preds.length && m.succs.length && m.weight) m.layer = Math.max(0, Math.min(...m.succs.map(s => s.layer)) - 1);
    }
    for (const m of members) { m.up = []; m.down = []; }
    const layers = [];
    const put = it => (layers[it.layer] = layers[it.layer] || []).push(it);
    members.forEach(put);
    for (const [a, b, e] of forward) {   // a chain of dummies through the rows between a and b
      let prev = a;
      for (let l = a.layer + 1; l < b.layer; l++) {
        const d = { dummy: true, w: 0, h: 0, layer: l, up: [prev], down: [] };
        prev.down.push(d);
        put(d);
        e.dummies.push(d);
        prev = d;
      }
      prev.down.push(b);
      b.up.push(prev);
    }
    for (let l = 0; l < layers.length; l++) layers[l] = layers[l] || [];
    layers.forEach(row => row.forEach((it, k) => { it.pos = k; }));
    for (let sweep = 0; sweep < 4; sweep++) {   // crossing reduction
      const down = sweep % 2 === 0;
      const seq = down ? layers.slice(1) : layers.slice(0, -1).reverse();
      for (const row of seq) {
        for (const it of row) {
          const ns = down ? it.up : it.down;
          it.bary = ns.length ? ns.reduce((s, n) => s + n.pos, 0) / ns.length : it.pos;
        }
        row.sort((a, b) => a.bary - b.bary || a.pos - b.pos);
        row.forEach((it, k) => { it.pos = k; });
      }
    }
    // x: packed first, then pulled towards the neighbours' mean, row by row, down and up
    const gap = (a, b) => (a.w + b.w) / 2 + (a.dummy || b.dummy ? GAP_DUMMY : GAP_X);
    for (const row of layers) {
      let x = 0;
      row.forEach((it, k) => { if (k) x += gap(row[k - 1], it); it.x = x; });
      const shift = x / 2;
      row.forEach(it => { it.x -= shift; });
    }
    for (let sweep = 0; sweep < 6; sweep++) {
      const down = sweep % 2 === 0;
      const seq = down ? layers.slice(1) : layers.slice(0, -1).reverse();
      for (const row of seq) {
        const want = row.map(it => {
          const ns = down ? it.up : it.down;
          return ns.length ? ns.reduce((s, n) => s + n.x, 0) / ns.length : it.x;
        });
        closestOrdered(row, want, gap);
      }
    }
    let x0 = Infinity, x1 = -Infinity, y = 0;
    layers.forEach(row => {
      const h = Math.max(0, ...row.map(it => it.h));
      row.forEach(it => { it.y = y; it.rowH = h; x0 = Math.min(x0, it.x - it.w / 2); x1 = Math.max(x1, it.x + it.w / 2); });
      y += h + GAP_Y;
    });
    if (x0 === Infinity) { x0 = 0; x1 = 0; }
    for (const row of layers) for (const it of row) it.x -= x0;
    const inner = { w: x1 - x0, h: Math.max(0, y - GAP_Y) };
    if (block.key !== "root") { block.w = Math.max(inner.w + 2 * PAD, block.minW || 0); block.h = inner.h + HEADER + PAD; }
    else { block.w = inner.w; block.h = inner.h; }
    if (block.w > inner.w + 2 * PAD && block.key !== "root") {   // a wide title: centre the contents under it
      const extra = (block.w - inner.w - 2 * PAD) / 2;
      for (const row of layers) for (const it of row) it.x += extra;
    }
    return layers;
  }

  // Move the row's items as close to `want` as their order and gaps allow (least squares):
  // with x[i] = y[i] + offset[i], the gaps become y non-decreasing, an isotonic regression.
  function closestOrdered(row, want, gap) {
    const offset = [0];
    for (let k = 1; k < row.length; k++) offset.push(offset[k - 1] + gap(row[k - 1], row[k]));
    const pools = [];   // [sum, count]
    for (let k = 0; k < row.length; k++) {
      pools.push([want[k] - offset[k], 1]);
      while (pools.length > 1) {
        const [s1, c1] = pools[pools.length - 2], [s2, c2] = pools[pools.length - 1];
        if (s1 / c1 <= s2 / c2) break;
        pools.splice(pools.length - 2, 2, [s1 + s2, c1 + c2]);
      }
    }
    let k = 0;
    for (const [s, c] of pools) for (let j = 0; j < c; j++, k++) row[k].x = s / c + offset[k];
  }

  function place(block, left, top, children, rows) {
    const ox = block.key === "root" ? left : left + PAD, oy = block.key === "root" ? top : top + HEADER;
    block.ax = left + block.w / 2; block.ay = top;
    for (const row of rows.get(block.key)) {
      for (const it of row) {
        if (it.dummy) { it.ax = ox + it.x; it.ay = oy + it.y; continue; }
        if (it.block) place(it, ox + it.x - it.w / 2, oy + it.y, children, rows);
        else { it.ax = ox + it.x; it.ay = oy + it.y; }
      }
    }
  }

  return { layout, PAD, HEADER };
})();
