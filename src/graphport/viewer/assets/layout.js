// graphport viewer layout: a layered (Sugiyama-style) top-to-bottom layout of nested blocks.
//
// Each expanded module is a block laid out on its own, bottom-up, and then placed as one
// rectangle among its siblings, so module boxes nest but never overlap. Inside a block:
// items get layers by longest path in data-flow order (an edge that would go back, between
// two modules that call into each other, is left out of the layering), then move down to
// just above their first user; edges that span
// layers get dummy points so they route between boxes (an edge entering or leaving a block
// gets a port on its top or bottom row, and dummies from there to its item); rows are ordered by barycenters
// (a few sweeps down and up) and x positions are the closest to the neighbours' mean that
// keep the row's order and gaps (an isotonic regression, solved by pooling adjacent
// violators).
"use strict";
const graphportLayout = (function () {
  const GAP_X = 26, GAP_DUMMY = 12, GAP_Y = 34, PAD = 12, HEADER = 24;

  // items: Map key -> {key, parent, w, h, first}; blocks are items too, with `block: true`
  // (their w and h are computed here). parent is a block's key or "root".
  // edges: [{from, to}] between leaf items. Returns the items with ax (centre x), ay (top)
  // set; `trunks`, the shared runs of dummies, each as one polyline of absolute points; and each
  // edge with `segments` ([p, q] pairs: from the bottom of `from` into its trunks, between
  // them, and out to the top of `to`) and `runs` ([trunk, length]: the part of each trunk it
  // follows). Drawing the trunks once and the segments per edge keeps a node used by thousands
  // of others linear in size.
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
    // each edge is lifted to the block where its two ends' branches meet; inside the blocks
    // it leaves and enters, it runs from its item to a port on the block's bottom row, and
    // from a port on the block's top row to its item
    const routes = new Map();   // block key -> {lifted, entries, exits}: Maps of shared chains
    const routesOf = b => {
      if (!routes.has(b)) routes.set(b, { lifted: new Map(), entries: new Map(), exits: new Map() });
      return routes.get(b);
    };
    const chain = (map, key, make) => { if (!map.has(key)) map.set(key, make()); return map.get(key); };
    for (const e of edges) {
      const pa = ancestry(e.from), pb = ancestry(e.to);
      let p = 0;
      while (pa[p] === pb[p]) p++;
      e.chains = [];
      for (let j = pa.length - 2; j >= p; j--) {
        const port = chain(routesOf(pa[j]).exits, e.from, () => ({ children: new Map() }));
        e.chains.push(chain(port.children, pa[j + 1], () => ({ child: pa[j + 1], route: null })));
      }
      const block = p ? pa[p - 1] : "root";
      e.chains.push(chain(routesOf(block).lifted, pa[p] + "|" + pb[p], () => ({ a: pa[p], b: pb[p], route: null })));
      for (let j = p; j < pb.length - 1; j++) {
        const port = chain(routesOf(pb[j]).entries, e.from, () => ({ children: new Map() }));
        e.chains.push(chain(port.children, pb[j + 1], () => ({ child: pb[j + 1], route: null })));
      }
    }
    const root = { key: "root", block: true, w: 0, h: 0 };
    const order = [];   // blocks, children before parents
    (function visit(b) {
      for (const c of children.get(b.key)) if (c.block) visit(c);
      order.push(b);
    })(root);
    const rows = new Map();
    const trunks = [];
    for (const b of order) rows.set(b.key, layoutBlock(b, children.get(b.key), routesOf(b.key), trunks));
    place(root, 0, 0, children, rows);
    const top = d => [d.ax, d.ay], bottom = d => [d.ax, d.ay + d.rowH];
    for (const e of edges) {
      const from = items.get(e.from), to = items.get(e.to);
      let prev = [from.ax, from.ay + from.h];
      e.segments = [];
      e.runs = [];
      for (const c of e.chains) {
        if (!c.route) continue;
        const { head, run, k, tail } = c.route;
        for (const d of head) { e.segments.push([prev, top(d)]); prev = top(d); }        // entry ports
        if (k) { e.segments.push([prev, top(run[0])]); prev = bottom(run[k - 1]); e.runs.push([run, k]); }
        for (const d of tail) { e.segments.push([prev, bottom(d)]); prev = bottom(d); }  // exit ports
      }
      e.segments.push([prev, [to.ax, to.ay]]);
    }
    return { root, edges, trunks: trunks.filter(t => t.length).map(t => trunkPoints(t)) };
  }

  function trunkPoints(run, k = run.length) {
    const points = [];
    for (let j = 0; j < k; j++) points.push([run[j].ax, run[j].ay], [run[j].ax, run[j].ay + run[j].rowH]);
    return points;
  }

  function layoutBlock(block, members, routes, trunks) {
    const byKey = new Map(members.map(m => [m.key, m]));
    members.sort((a, b) => a.first - b.first);
    for (const m of members) { m.preds = []; m.succs = []; m.layer = 0; }
    const forward = [];
    for (const e of routes.lifted.values()) {
      const a = byKey.get(e.a), b = byKey.get(e.b);
      if (a.first < b.first) forward.push([a, b, e]);
    }
    for (const [a, b] of forward) { a.succs.push(b); b.preds.push(a); }
    for (const m of members) for (const p of m.preds) m.layer = Math.max(m.layer, p.layer + 1);
    // then everything but the program's inputs moves down to the row just above its first user
    // (a weight next to its user, a mask computed where it is used, not in the top row)
    for (let k = members.length - 1; k >= 0; k--) {
      const m = members[k];
      if (m.succs.length && !m.input) m.layer = Math.max(m.layer, Math.min(...m.succs.map(s => s.layer)) - 1);
    }
    for (const m of members) { m.up = []; m.down = []; }
    const layers = [];
    const put = it => (layers[it.layer] = layers[it.layer] || []).push(it);
    members.forEach(put);
    const dummy = (layer, port) => { const d = { dummy: true, port, w: 0, h: 0, layer, up: [], down: [] }; put(d); return d; };
    const link = (a, b) => { a.down.push(b); b.up.push(a); };
    // Edges from one source share a trunk of dummies down to their furthest target, and
    // leave it at their target's row: one line with branches, not one line per edge.
    const trunk = (start, firstLayer) => {
      const run = [];
      trunks.push(run);
      return (layer) => {   // {run, k}: the first k dummies of the run reach rows firstLayer..layer-1
        while (firstLayer + run.length < layer) {
          const d = dummy(firstLayer + run.length);
          link(run.length ? run[run.length - 1] : start, d);
          run.push(d);
        }
        return { run, k: Math.max(0, layer - firstLayer) };
      };
    };
    const bySource = new Map();
    for (const [a, b, e] of forward) {
      if (!bySource.has(a)) bySource.set(a, trunk(a, a.layer + 1));
      const { run, k } = bySource.get(a)(b.layer);
      e.route = { head: [], run, k, tail: [] };
      link(k ? run[k - 1] : a, b);
    }
    const last = Math.max(0, layers.length - 1);
    // an item in the top row is entered straight from above, one in the bottom row left straight below
    for (const port of routes.entries.values()) {   // from the top row down to the item
      const inner = [...port.children.values()].filter(c => byKey.get(c.child).layer > 0);
      if (!inner.length) continue;
      const top = dummy(0, "entry"), down = trunk(top, 1);
      for (const c of inner) {
        const child = byKey.get(c.child), { run, k } = down(child.layer);
        c.route = { head: [top], run, k, tail: [] };
        link(k ? run[k - 1] : top, child);
      }
    }
    for (const port of routes.exits.values()) {     // from the item down to the bottom row
      for (const c of port.children.values()) {
        const child = byKey.get(c.child);
        if (child.layer === last) continue;
        const bottom = dummy(last, "exit"), { run, k } = trunk(child, child.layer + 1)(last);
        c.route = { head: [], run, k, tail: [bottom] };
        link(k ? run[k - 1] : child, bottom);
      }
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

  return { layout, trunkPoints, PAD, HEADER };
})();
