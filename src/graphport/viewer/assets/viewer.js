// graphport viewer: lays out and draws one program graph, grouped by module.
// Large graphs stay usable: modules start collapsed until at most BUDGET boxes show, and
// only what lies in the window is put in the DOM (redrawn on every pan and zoom).
"use strict";
(function () {
  const DATA = JSON.parse(document.getElementById("graph-data").textContent);
  const SVG_NS = "http://www.w3.org/2000/svg";
  const W = 210, H = 60, GAP_X = 30, GAP_Y = 46, PAD = 10, BUDGET = 300;
  const svg = document.getElementById("canvas");
  const viewport = document.getElementById("viewport");
  const layers = { groups: document.getElementById("groups"), edges: document.getElementById("edges"),
                   nodes: document.getElementById("nodes") };
  const view = { x: 40, y: 40, k: 1 };
  const perGraph = {};          // graph name -> prepared data and its collapsed groups
  let current = null;           // the prepared graph shown
  let layout = null;            // positions of what is shown
  let selected = -1;
  let matches = new Set();
  let frame = 0;

  // -- preparing a graph ------------------------------------------------------------------

  function prepare(name) {
    if (perGraph[name]) return perGraph[name];
    const nodes = DATA.graphs[name];
    const chains = nodes.map(n => chainOf(n.g));
    const users = nodes.map(() => []);
    nodes.forEach((n, i) => n.i.forEach(j => users[j].push(i)));
    const size = new Map(), direct = new Map(), children = new Map();
    chains.forEach(chain => {
      chain.forEach(g => size.set(g, (size.get(g) || 0) + 1));
      if (chain.length) direct.set(chain[chain.length - 1], (direct.get(chain[chain.length - 1]) || 0) + 1);
      chain.forEach((g, d) => {
        if (!children.has(g)) children.set(g, new Set());
        if (d + 1 < chain.length) children.get(g).add(chain[d + 1]);
      });
    });
    const g = { name, nodes, chains, users, size, direct, children, collapsed: new Set() };
    defaultCollapse(g);
    perGraph[name] = g;
    return g;
  }

  function chainOf(group) {
    const chain = [];
    for (let g = group; g >= 0; g = DATA.groups[g].parent) chain.unshift(g);
    return chain;
  }

  // Collapse every module, then open the biggest ones while at most BUDGET boxes show.
  function defaultCollapse(g) {
    const top = [...g.size.keys()].filter(k => DATA.groups[k].parent < 0 || !g.size.has(DATA.groups[k].parent));
    g.size.forEach((_, k) => g.collapsed.add(k));
    let shown = g.chains.filter(c => c.length === 0).length + top.length;
    const queue = top.slice();
    while (queue.length) {
      queue.sort((a, b) => g.size.get(b) - g.size.get(a));
      const k = queue.shift();
      const delta = (g.direct.get(k) || 0) + g.children.get(k).size - 1;
      if (shown + delta > BUDGET) continue;
      g.collapsed.delete(k);
      shown += delta;
      queue.push(...g.children.get(k));
    }
  }

  // -- layout -----------------------------------------------------------------------------

  function representative(g, i) {
    for (const k of g.chains[i]) if (g.collapsed.has(k)) return "g" + k;
    return "n" + i;
  }

  function computeLayout(g) {
    const items = new Map();      // key -> {key, node|group, first, preds, succs}
    const rep = g.nodes.map((_, i) => representative(g, i));
    g.nodes.forEach((n, i) => {
      const key = rep[i];
      if (!items.has(key)) items.set(key, { key, node: key[0] === "n" ? i : -1, group: key[0] === "g" ? +key.slice(1) : -1,
                                            first: i, preds: new Set(), succs: new Set(), count: 0 });
      items.get(key).count++;
    });
    g.nodes.forEach((n, i) => n.i.forEach(j => {
      if (rep[j] !== rep[i]) { items.get(rep[i]).preds.add(rep[j]); items.get(rep[j]).succs.add(rep[i]); }
    }));
    const order = [...items.values()].sort((a, b) => a.first - b.first);
    for (const it of order) {     // longest path, ignoring edges that go back (a module called twice)
      it.layer = 0;
      for (const p of it.preds) { const q = items.get(p); if (q.first < it.first) it.layer = Math.max(it.layer, q.layer + 1); }
    }
    for (const it of order) {     // weights and buffers sit just above their first user
      if (it.node >= 0 && !it.preds.size && it.succs.size && g.nodes[it.node].k === "placeholder" && g.nodes[it.node].t) {
        it.layer = Math.max(0, Math.min(...[...it.succs].map(s => items.get(s).layer)) - 1);
      }
    }
    const rows = [];
    order.forEach(it => (rows[it.layer] = rows[it.layer] || []).push(it));
    rows.forEach((row, y) => {
      if (!row) return;
      row.forEach(it => {
        const xs = [...it.preds].map(p => items.get(p)).filter(q => q.x !== undefined).map(q => q.x);
        it.bary = xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : -1e9 + it.first;
      });
      row.splice(0, row.length, ...clustered(row, 0, it => itemChain(g, it)));
      row.forEach((it, k) => { it.x = (k - (row.length - 1) / 2) * (W + GAP_X); it.y = y * (H + GAP_Y); });
    });
    const boxes = groupBoxes(g, order);
    const edges = [];
    for (const it of order) for (const p of it.preds) edges.push([items.get(p), it]);
    return { items, order, edges, boxes };
  }

  function itemChain(g, it) {
    return it.node >= 0 ? g.chains[it.node] : chainOf(it.group);
  }

  // A row's items in barycenter order, with the members of each module kept side by side
  // (recursively), so module boxes do not interleave.
  function clustered(items, depth, chainFn) {
    const parts = new Map();
    for (const it of items) {
      const chain = chainFn(it);
      const key = depth < chain.length ? "g" + chain[depth] : "i" + it.key;
      if (!parts.has(key)) parts.set(key, []);
      parts.get(key).push(it);
    }
    const sorted = [...parts.entries()].map(([key, members]) => ({
      members: key[0] === "g" && members.length > 1 ? clustered(members, depth + 1, chainFn) : members,
      bary: members.reduce((a, m) => a + m.bary, 0) / members.length,
      first: Math.min(...members.map(m => m.first)) }));
    sorted.sort((a, b) => a.bary - b.bary || a.first - b.first);
    return sorted.flatMap(p => p.members);
  }

  function groupBoxes(g, order) {
    const boxes = new Map();
    for (const it of order) {
      const chain = it.node >= 0 ? g.chains[it.node] : chainOf(DATA.groups[it.group].parent);
      chain.forEach((k, depth) => {
        if (g.collapsed.has(k)) return;
        const b = boxes.get(k) || { group: k, depth, x0: Infinity, y0: Infinity, x1: -Infinity, y1: -Infinity };
        b.x0 = Math.min(b.x0, it.x - W / 2); b.x1 = Math.max(b.x1, it.x + W / 2);
        b.y0 = Math.min(b.y0, it.y - H / 2); b.y1 = Math.max(b.y1, it.y + H / 2);
        boxes.set(k, b);
      });
    }
    // a box's margin grows with the boxes nested in it, so nested titles stack instead of overlapping
    const sorted = [...boxes.values()].sort((a, b) => b.depth - a.depth);
    for (const b of sorted) {
      b.height = b.height || 1;
      const parent = boxes.get(DATA.groups[b.group].parent);
      if (parent) parent.height = Math.max(parent.height || 1, b.height + 1);
    }
    return sorted.reverse();
  }

  // -- drawing ----------------------------------------------------------------------------

  function el(tag, attrs, parent) {
    const e = document.createElementNS(SVG_NS, tag);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }

  function text(parent, x, y, cls, s, max) {
    const t = el("text", { x, y, class: cls }, parent);
    t.textContent = s.length > max ? s.slice(0, max - 1) + "\u2026" : s;
  }

  function shortSource(n) {
    if (n.l < 0) return "";
    const s = DATA.sources[n.l];
    const m = /([^\/\\]+):(\d+) in /.exec(s);
    return m ? m[1] + ":" + m[2] : s;
  }

  function scheduleDraw() {
    if (!frame) frame = requestAnimationFrame(() => { frame = 0; draw(); });
  }

  function draw() {
    viewport.setAttribute("transform", `translate(${view.x},${view.y}) scale(${view.k})`);
    for (const k in layers) layers[k].textContent = "";
    const r = svg.getBoundingClientRect();
    const vx0 = -view.x / view.k - W, vy0 = -view.y / view.k - H;
    const vx1 = (r.width - view.x) / view.k + W, vy1 = (r.height - view.y) / view.k + H;
    const inView = (x0, y0, x1, y1) => x1 >= vx0 && x0 <= vx1 && y1 >= vy0 && y0 <= vy1;
    const detail = view.k >= 0.35;
    for (const b of layout.boxes) {
      const pad = PAD * b.height;
      const x0 = b.x0 - pad, y0 = b.y0 - 18 * b.height, x1 = b.x1 + pad, y1 = b.y1 + pad;
      if (!inView(x0, y0, x1, y1)) continue;
      const grp = el("g", { class: "group", "data-group": b.group }, layers.groups);
      el("rect", { x: x0, y: y0, width: x1 - x0, height: y1 - y0 }, grp);
      if (detail) {
        const gr = DATA.groups[b.group];
        text(grp, x0 + 6, y0 + 13, "group-label", "\u25be " + gr.path + " (" + gr.type + ")", 200);
      }
    }
    const hot = selected >= 0 ? representative(current, selected) : null;
    for (const [a, b] of layout.edges) {
      if (!inView(Math.min(a.x, b.x), Math.min(a.y, b.y), Math.max(a.x, b.x), Math.max(a.y, b.y))) continue;
      const y0 = a.y + H / 2, y1 = b.y - H / 2, my = (y0 + y1) / 2;
      el("path", { d: `M${a.x},${y0} C${a.x},${my} ${b.x},${my} ${b.x},${y1}`,
                   class: "edge" + (a.key === hot || b.key === hot ? " hot" : "") }, layers.edges);
    }
    let shown = 0;
    for (const it of layout.order) {
      if (!inView(it.x - W / 2, it.y - H / 2, it.x + W / 2, it.y + H / 2)) continue;
      shown++;
      drawItem(it, detail);
    }
    document.getElementById("stats").textContent =
      `${current.nodes.length} nodes \u00b7 ${layout.order.length} boxes \u00b7 ${shown} drawn`;
    document.body.dataset.ready = "1";   // drawn at least once
  }

  function drawItem(it, detail) {
    const x = it.x - W / 2, y = it.y - H / 2;
    if (it.node >= 0) {
      const n = current.nodes[it.node];
      const kind = n.sg ? "control" : n.o === "parameter" || n.o === "state" ? "parameter" : n.k;
      const cls = `node kind-${kind}` + (it.node === selected ? " selected" : "") + (matches.has(it.node) ? " match" : "");
      const grp = el("g", { class: cls, "data-node": it.node, "data-name": n.n }, layers.nodes);
      el("rect", { x, y, width: W, height: H }, grp);
      if (!detail) return;
      text(grp, x + 8, y + 14, "op", n.k === "call_function" ? n.o : `${n.o}: ${n.n}`, 32);
      text(grp, x + 8, y + 27, "name", n.k === "call_function" ? n.n : n.t || "", 34);
      text(grp, x + 8, y + 41, "shape", n.s, 36);
      text(grp, x + 8, y + 54, "src", shortSource(n), 36);
    } else {
      const gr = DATA.groups[it.group];
      const grp = el("g", { class: "node kind-group", "data-collapsed": it.group }, layers.nodes);
      el("rect", { x, y, width: W, height: H }, grp);
      if (!detail) return;
      text(grp, x + 8, y + 16, "op", "\u25b8 " + gr.path, 32);
      text(grp, x + 8, y + 31, "name", gr.type, 34);
      text(grp, x + 8, y + 46, "src", `${it.count} nodes (click to expand)`, 36);
    }
  }

  // -- interaction ------------------------------------------------------------------------

  function show(name, keepView) {
    current = prepare(name);
    layout = computeLayout(current);
    crumbs(name);
    if (!keepView) fit();
    scheduleDraw();
  }

  function relayout() {
    layout = computeLayout(current);
    scheduleDraw();
  }

  function fit() {
    const r = svg.getBoundingClientRect();
    let x0 = Infinity, y0 = Infinity, x1 = -Infinity, y1 = -Infinity;
    for (const it of layout.order) {
      x0 = Math.min(x0, it.x - W / 2); x1 = Math.max(x1, it.x + W / 2);
      y0 = Math.min(y0, it.y - H / 2); y1 = Math.max(y1, it.y + H / 2);
    }
    const k = Math.min(1, (r.width - 40) / (x1 - x0 + 60), (r.height - 40) / (y1 - y0 + 60));
    if (k >= 0.6) {             // it fits readably: center it
      view.k = k;
      view.x = (r.width - (x1 + x0) * k) / 2;
      view.y = (r.height - (y1 + y0) * k) / 2;
    } else {                    // too big to read whole: start at the top, readable
      view.k = 0.85;
      view.x = r.width / 2 - ((x0 + x1) / 2) * view.k;
      view.y = 60 - y0 * view.k;
    }
    scheduleDraw();
  }

  function center(it) {
    const r = svg.getBoundingClientRect();
    view.k = Math.max(view.k, 0.8);
    view.x = r.width / 2 - it.x * view.k;
    view.y = r.height / 2 - it.y * view.k;
  }

  function crumbs(name) {
    const nav = document.getElementById("crumbs");
    nav.textContent = "";
    const parts = name === "main" ? ["main"] : ["main", ...name.split("/")];
    parts.forEach((p, k) => {
      const a = document.createElement("a");
      a.textContent = (k ? "\u203a " : "") + p;
      const target = k === 0 ? "main" : parts.slice(1, k + 1).join("/");
      a.onclick = () => { selected = -1; show(target); };
      nav.appendChild(a);
    });
  }

  function select(i) {
    selected = i;
    const n = current.nodes[i];
    const d = document.getElementById("details");
    d.textContent = "";
    const h = document.createElement("h3");
    h.textContent = n.n;
    d.appendChild(h);
    const dl = document.createElement("dl");
    const row = (label, value, cls) => {
      const dt = document.createElement("dt"); dt.textContent = label; dl.appendChild(dt);
      const dd = document.createElement("dd"); dd.className = cls || "";
      if (value instanceof Node) dd.appendChild(value); else dd.textContent = value;
      dl.appendChild(dd);
    };
    const links = (idx) => {
      const span = document.createElement("span");
      idx.forEach((j, k) => {
        const a = document.createElement("a");
        a.textContent = current.nodes[j].n;
        a.onclick = () => reveal(j);
        span.appendChild(a);
        if (k + 1 < idx.length) span.appendChild(document.createTextNode(", "));
      });
      return span;
    };
    row("op", n.o, "op");
    row("kind", n.k, "kind");
    if (n.t) row("target", n.t, "target");
    row("shape", n.s, "shape");
    row("source", n.l >= 0 ? DATA.sources[n.l] : "\u2014", "source");
    row("module", current.chains[i].map(g => `${DATA.groups[g].path} (${DATA.groups[g].type})`).join(" \u203a ") || "\u2014",
        "module");
    row("inputs", links(n.i), "inputs");
    row("users", links(current.users[i]), "users");
    if (n.sg) {
      const span = document.createElement("span");
      n.sg.forEach(s => {
        const a = document.createElement("a");
        a.textContent = "open " + s.split("/").pop() + " ";
        a.onclick = () => { selected = -1; show(s); };
        span.appendChild(a);
      });
      row("subgraphs", span, "subgraphs");
    }
    d.appendChild(dl);
    scheduleDraw();
  }

  function reveal(i) {
    current.chains[i].forEach(g => current.collapsed.delete(g));
    layout = computeLayout(current);
    center(layout.items.get("n" + i));
    select(i);
  }

  function search(q) {
    q = q.trim().toLowerCase();
    const results = document.getElementById("results");
    results.textContent = "";
    matches = new Set();
    if (q) current.nodes.forEach((n, i) => {
      if (n.n.toLowerCase().includes(q) || n.o.toLowerCase().includes(q)) matches.add(i);
    });
    if (q) {
      const head = document.createElement("div");
      head.textContent = `${matches.size} match${matches.size === 1 ? "" : "es"}`;
      results.appendChild(head);
      [...matches].slice(0, 50).forEach(i => {
        const div = document.createElement("div");
        const a = document.createElement("a");
        a.textContent = current.nodes[i].n;
        a.onclick = () => reveal(i);
        div.appendChild(a);
        div.appendChild(document.createTextNode(" " + current.nodes[i].o));
        results.appendChild(div);
      });
    }
    scheduleDraw();
  }

  let drag = null;
  svg.addEventListener("mousedown", e => { drag = { x: e.clientX, y: e.clientY, vx: view.x, vy: view.y, moved: false }; });
  window.addEventListener("mousemove", e => {
    if (!drag) return;
    const dx = e.clientX - drag.x, dy = e.clientY - drag.y;
    if (Math.abs(dx) + Math.abs(dy) > 3) { drag.moved = true; svg.classList.add("dragging"); }
    view.x = drag.vx + dx; view.y = drag.vy + dy;
    if (drag.moved) scheduleDraw();
  });
  window.addEventListener("mouseup", () => { svg.classList.remove("dragging"); setTimeout(() => { drag = null; }, 0); });
  svg.addEventListener("click", e => {
    if (drag && drag.moved) return;
    const node = e.target.closest("[data-node]");
    if (node) return select(+node.dataset.node);
    const folded = e.target.closest("[data-collapsed]");
    if (folded) return toggle(+folded.dataset.collapsed, false);
    const box = e.target.closest("[data-group]");
    if (box && e.target.tagName === "text") toggle(+box.dataset.group, true);
  });

  // Collapse or expand a module, keeping it where it was on screen.
  function toggle(group, collapse) {
    const before = anchor(group);
    if (collapse) current.collapsed.add(group); else current.collapsed.delete(group);
    layout = computeLayout(current);
    const after = anchor(group);
    if (before && after) { view.x += (before[0] - after[0]) * view.k; view.y += (before[1] - after[1]) * view.k; }
    scheduleDraw();
  }

  function anchor(group) {
    const it = layout.items.get("g" + group);
    if (it) return [it.x, it.y - H / 2];
    const b = layout.boxes.find(b => b.group === group);
    return b ? [(b.x0 + b.x1) / 2, b.y0] : null;
  }
  svg.addEventListener("wheel", e => {
    e.preventDefault();
    const r = svg.getBoundingClientRect();
    const k = Math.min(3, Math.max(0.02, view.k * Math.exp(-e.deltaY * 0.0015)));
    const px = e.clientX - r.left, py = e.clientY - r.top;
    view.x = px - (px - view.x) * (k / view.k);
    view.y = py - (py - view.y) * (k / view.k);
    view.k = k;
    scheduleDraw();
  }, { passive: false });
  document.getElementById("search").addEventListener("input", e => search(e.target.value));
  document.getElementById("fit").onclick = () => fit();
  document.getElementById("expand-all").onclick = () => { current.collapsed.clear(); relayout(); };
  document.getElementById("collapse-all").onclick = () => { current.size.forEach((_, k) => current.collapsed.add(k)); relayout(); };
  window.addEventListener("resize", scheduleDraw);

  show("main");
  window.graphportViewer = { show, select, reveal, search, view, get layout() { return layout; },
                             get graph() { return current; } };
})();
