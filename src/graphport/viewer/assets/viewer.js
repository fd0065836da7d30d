// graphport viewer: draws one program graph top to bottom, nodes nested in their modules.
// Weights are hidden until asked for; modules open collapsed down to a readable number of
// boxes and expand in place; only what lies in the window is put in the DOM (redrawn on every
// pan and zoom), and a minimap shows where the window is on a large graph.
"use strict";
(function () {
  const DATA = JSON.parse(document.getElementById("graph-data").textContent);
  const SVG_NS = "http://www.w3.org/2000/svg";
  const W = 200, H = 48, BUDGET = 50;
  const svg = document.getElementById("canvas");
  const viewport = document.getElementById("viewport");
  const minimap = document.getElementById("minimap");
  const layers = { groups: document.getElementById("groups"), edges: document.getElementById("edges"),
                   nodes: document.getElementById("nodes") };
  const view = { x: 40, y: 40, k: 1 };
  const perGraph = {};          // graph name -> prepared data and its collapsed groups
  let current = null;           // the prepared graph shown
  let layout = null;            // positions of what is shown
  let selected = -1;
  let matches = new Set();
  let path = { from: -1, nodes: [], items: new Set(), edges: new Set() };
  let frame = 0;

  // -- preparing a graph ------------------------------------------------------------------

  function prepare(name) {
    if (perGraph[name]) return perGraph[name];
    const nodes = DATA.graphs[name];
    const chains = nodes.map(n => chainOf(n.g));
    const users = nodes.map(() => []);
    nodes.forEach((n, i) => n.i.forEach(j => users[j].push(i)));
    const g = { name, nodes, chains, users, collapsed: new Set(), shownWeights: new Set(), groups: new Set() };
    chains.forEach(c => c.forEach(k => g.groups.add(k)));
    boxedChains(g);
    defaultCollapse(g);
    perGraph[name] = g;
    return g;
  }

  function chainOf(group) {
    const chain = [];
    for (let g = group; g >= 0; g = DATA.groups[g].parent) chain.unshift(g);
    return chain;
  }

  // The modules that get a box: not one around a single node (a Linear holding one `linear`),
  // nor one with the same nodes as its parent (a Sequential inside a block); those show as
  // the node's label.
  function boxedChains(g) {
    const count = new Map();
    g.nodes.forEach((_, i) => { if (visible(g, i)) g.chains[i].forEach(k => count.set(k, (count.get(k) || 0) + 1)); });
    const boxed = k => {
      const c = count.get(k) || 0, parent = DATA.groups[k].parent;
      return c > 1 && !(parent >= 0 && count.get(parent) === c);
    };
    g.boxed = g.chains.map(chain => chain.filter(boxed));
  }

  function visible(g, i) {
    return !g.nodes[i].w || g.shownWeights.has(i);
  }

  // Open modules level by level, a whole level at a time, while at most BUDGET boxes show
  // (a model that would open as a handful of boxes opens one level further).
  function defaultCollapse(g) {
    g.boxed.forEach(chain => chain.forEach(k => g.collapsed.add(k)));   // a module boxed later starts open
    for (;;) {
      const frontier = new Set();
      g.nodes.forEach((n, i) => {
        if (!visible(g, i)) return;
        const k = g.boxed[i].find(k => g.collapsed.has(k));
        if (k !== undefined) frontier.add(k);
      });
      if (!frontier.size) return;
      const before = countItems(g);
      frontier.forEach(k => g.collapsed.delete(k));
      const after = countItems(g);   // a handful of boxes is too few: open those even past the budget
      if (after > BUDGET && before > 0 && !(before < 12 && after <= 4 * BUDGET)) {
        frontier.forEach(k => g.collapsed.add(k));
        return;
      }
    }
  }

  function countItems(g) {
    const keys = new Set();
    g.nodes.forEach((_, i) => { if (visible(g, i)) keys.add(representative(g, i)); });
    return keys.size;
  }

  function representative(g, i) {
    if (!visible(g, i)) return null;
    for (const k of g.boxed[i]) if (g.collapsed.has(k)) return "g" + k;
    return "n" + i;
  }

  // -- layout -----------------------------------------------------------------------------

  function computeLayout(g) {
    const items = new Map();
    const rep = g.nodes.map((_, i) => representative(g, i));
    const blockKey = k => "b" + k;
    const ensureBlock = (chain, upto) => {   // the expanded blocks of chain[0..upto), made with their parents
      let parent = "root";
      for (let d = 0; d < upto; d++) {
        const key = blockKey(chain[d]);
        if (!items.has(key)) {
          const title = boxTitle(chain[d], d ? chain[d - 1] : -1);
          items.set(key, { key, parent, block: true, group: chain[d], depth: d, title,
                           minW: title.length * 6.6 + 30 + 2 * graphportLayout.PAD });
        }
        parent = key;
      }
      return parent;
    };
    g.nodes.forEach((n, i) => {
      const key = rep[i];
      if (key === null) return;
      const chain = g.boxed[i];
      const depth = key[0] === "g" ? chain.indexOf(+key.slice(1)) : chain.length;
      const parent = ensureBlock(chain, depth);
      if (!items.has(key)) {
        items.set(key, { key, parent, w: W, h: H, first: i, count: 0, node: key[0] === "n" ? i : -1,
                         group: key[0] === "g" ? +key.slice(1) : -1, depth,
                         input: n.k === "placeholder" && !n.w });
      }
      items.get(key).count++;
      // a module's place in data-flow order is its first computation: weights are placeholders,
      // numbered before everything, so they count only for a module that holds nothing else
      const order = n.w ? i - g.nodes.length : i;
      for (let p = key[0] === "g" ? key : parent; p !== "root"; p = items.get(p).parent) {
        const b = items.get(p);
        b.order = b.order === undefined || (b.order < 0 && order >= 0) ? order : order < 0 && b.order >= 0 ? b.order
                  : Math.min(b.order, order);
      }
    });
    for (const b of items.values()) if (b.order !== undefined) b.first = b.order < 0 ? b.order + g.nodes.length : b.order;
    const seen = new Set(), edges = [];
    g.nodes.forEach((n, i) => {
      if (rep[i] === null) return;
      n.i.forEach(j => {
        const from = rep[j], to = rep[i];
        if (from === null || from === to || seen.has(from + "|" + to)) return;
        seen.add(from + "|" + to);
        edges.push({ from, to });
      });
    });
    const { root, trunks } = graphportLayout.layout(items, edges);
    const boxes = [...items.values()].filter(it => it.block).sort((a, b) => a.depth - b.depth);
    const leaves = [...items.values()].filter(it => !it.block).sort((a, b) => a.first - b.first);
    for (const e of edges) {   // a bounding box per edge, to draw only those in view
      const xs = e.segments.flat().map(p => p[0]), ys = e.segments.flat().map(p => p[1]);
      e.box = [Math.min(...xs), Math.min(...ys), Math.max(...xs), Math.max(...ys)];
    }
    return { items, leaves, boxes, edges, trunks, rep, root };
  }

  function titleOf(gr) {
    return `${gr.path} (${gr.type})`;
  }

  // A box's title: its path below the box it sits in (`layer.3 (BertLayer)` inside `encoder`).
  function boxTitle(k, outer) {
    const gr = DATA.groups[k];
    const prefix = outer >= 0 ? DATA.groups[outer].path + "." : "";
    return `${gr.path.startsWith(prefix) ? gr.path.slice(prefix.length) : gr.path} (${gr.type})`;
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

  function shortOp(n) {
    if (n.k !== "call_function") return n.k === "placeholder" ? `${n.o} ${n.n}` : n.o;
    const parts = n.o.split(".");
    return parts.length === 3 ? parts[1] : n.o;
  }

  function shortSource(n) {
    if (n.l < 0) return "";
    const m = /([^\/\\]+):(\d+) in /.exec(DATA.sources[n.l]);
    return m ? m[1] + ":" + m[2] : "";
  }

  function scheduleDraw() {
    if (!frame) frame = requestAnimationFrame(() => { frame = 0; draw(); });
  }

  function edgePath(points) {
    let d = `M${points[0][0]},${points[0][1]}`;
    for (let k = 1; k < points.length; k++) {
      const [x0, y0] = points[k - 1], [x1, y1] = points[k];
      if (x0 === x1) d += ` L${x1},${y1}`;
      else { const my = (y0 + y1) / 2; d += ` C${x0},${my} ${x1},${my} ${x1},${y1}`; }
    }
    return d;
  }

  function draw() {
    viewport.setAttribute("transform", `translate(${view.x},${view.y}) scale(${view.k})`);
    for (const k in layers) layers[k].textContent = "";
    const r = svg.getBoundingClientRect();
    const vx0 = -view.x / view.k, vy0 = -view.y / view.k;
    const vx1 = (r.width - view.x) / view.k, vy1 = (r.height - view.y) / view.k;
    const inView = (x0, y0, x1, y1) => x1 >= vx0 && x0 <= vx1 && y1 >= vy0 && y0 <= vy1;
    const detail = view.k >= 0.3;
    for (const b of layout.boxes) {
      const x0 = b.ax - b.w / 2, y0 = b.ay;
      if (!inView(x0, y0, x0 + b.w, y0 + b.h)) continue;
      const grp = el("g", { class: `group depth-${b.depth % 2 ? "odd" : "even"}`, "data-group": b.group }, layers.groups);
      el("rect", { x: x0, y: y0, width: b.w, height: b.h }, grp);
      if (detail) text(grp, x0 + 8, y0 + 16, "group-label", "\u25be " + b.title, Math.floor(b.w / 6.6));
      el("title", {}, grp).textContent = titleOf(DATA.groups[b.group]) + " \u2014 click the title to collapse";
    }
    const hot = selected >= 0 ? layout.rep[selected] : null;
    const boxOf = points => {
      let x0 = Infinity, y0 = Infinity, x1 = -Infinity, y1 = -Infinity;
      for (const [x, y] of points) { x0 = Math.min(x0, x); y0 = Math.min(y0, y); x1 = Math.max(x1, x); y1 = Math.max(y1, y); }
      return [x0, y0, x1, y1];
    };
    for (const t of layout.trunks) {   // runs shared by the edges from one node
      if (inView(...boxOf(t))) el("path", { d: edgePath(t), class: "edge trunk" }, layers.edges);
    }
    for (const e of layout.edges) {
      if (!inView(...e.box)) continue;
      const mark = (path.edges.has(e.from + "|" + e.to) ? " on-path" : "") + (e.from === hot || e.to === hot ? " hot" : "");
      el("path", { d: e.segments.map(edgePath).join(" "), class: "edge" + mark, "data-from": e.from, "data-to": e.to },
         layers.edges);
      // a marked edge is drawn again over the part of each trunk it follows
      if (mark) for (const [run, k] of e.runs) el("path", { d: edgePath(graphportLayout.trunkPoints(run, k)), class: "edge" + mark }, layers.edges);
    }
    let shown = 0;
    const folded = new Set([...matches].map(i => layout.rep[i]));   // folded modules holding a match
    for (const it of layout.leaves) {
      if (!inView(it.ax - W / 2, it.ay, it.ax + W / 2, it.ay + H)) continue;
      shown++;
      drawItem(it, detail, folded);
    }
    document.getElementById("stats").textContent =
      `${current.nodes.length} nodes \u00b7 ${layout.leaves.length} boxes \u00b7 ${shown} drawn`;
    drawMinimap(r);
    document.body.dataset.ready = "1";   // drawn at least once
  }

  function drawItem(it, detail, folded) {
    const x = it.ax - W / 2, y = it.ay;
    const onPath = path.items.has(it.key) ? " on-path" : "";
    if (it.node >= 0) {
      const n = current.nodes[it.node];
      const kind = n.sg ? "control" : n.w ? "weight" : n.k;
      const cls = `node kind-${kind}` + (it.node === selected ? " selected" : "") + (matches.has(it.node) ? " match" : "") + onPath;
      const grp = el("g", { class: cls, "data-node": it.node, "data-name": n.n }, layers.nodes);
      el("rect", { x, y, width: W, height: H }, grp);
      if (!detail) return;
      const opText = shortOp(n), op = el("text", { x: x + 8, y: y + 15, class: "op" }, grp);
      op.textContent = opText.length > 25 ? opText.slice(0, 24) + "\u2026" : opText;
      if (n.k === "call_function" && !n.n.startsWith(opText) || /_\d+$/.test(n.n) && n.n.length + opText.length <= 28) {
        const name = el("tspan", { class: "name", dx: 6 }, op);
        name.textContent = n.n.length + opText.length > 28 ? "" : n.n;
      }
      text(grp, x + 8, y + 29, "shape", n.s, 34);
      const chain = current.chains[it.node], inner = chain[chain.length - 1];
      const module = inner !== undefined && !current.boxed[it.node].includes(inner) ? DATA.groups[inner].path.split(".").pop() : "";
      const src = shortSource(n);
      text(grp, x + 8, y + 42, "src", [module, src].filter(s => s).join(" \u00b7 "), 36);
    } else {
      const gr = DATA.groups[it.group];
      const grp = el("g", { class: "node kind-group" + (folded.has(it.key) ? " match" : "") + onPath, "data-collapsed": it.group },
                     layers.nodes);
      el("rect", { x, y, width: W, height: H }, grp);
      if (!detail) return;
      text(grp, x + 8, y + 15, "op", "\u25b8 " + gr.path.split(".").slice(-2).join("."), 30);
      el("title", {}, grp).textContent = titleOf(gr) + " \u2014 click to expand";
      text(grp, x + 8, y + 29, "name", gr.type, 34);
      text(grp, x + 8, y + 42, "src", `${it.count} nodes \u00b7 click to expand`, 36);
    }
  }

  // -- minimap ----------------------------------------------------------------------------

  function minimapScale() {
    const r = layout.root;
    const k = Math.min(minimap.width / Math.max(r.w, 1), minimap.height / Math.max(r.h, 1));
    return { k, ox: (minimap.width - r.w * k) / 2 - (r.ax - r.w / 2) * k, oy: (minimap.height - r.h * k) / 2 - r.ay * k };
  }

  function drawMinimap(screen) {
    const r = layout.root, vw = screen.width / view.k, vh = screen.height / view.k;
    minimap.hidden = r.w <= vw * 1.05 && r.h <= vh * 1.05;
    if (minimap.hidden) return;
    const ctx = minimap.getContext("2d"), m = minimapScale();
    ctx.clearRect(0, 0, minimap.width, minimap.height);
    ctx.strokeStyle = "#d4a72c";
    for (const b of layout.boxes) ctx.strokeRect(m.ox + (b.ax - b.w / 2) * m.k, m.oy + b.ay * m.k, b.w * m.k, b.h * m.k);
    ctx.fillStyle = "#8c959f";
    for (const it of layout.leaves) {
      ctx.fillStyle = matches.has(it.node) || path.items.has(it.key) ? "#bf3989" : it.node >= 0 ? "#8c959f" : "#d4a72c";
      ctx.fillRect(m.ox + (it.ax - W / 2) * m.k, m.oy + it.ay * m.k, Math.max(1, W * m.k), Math.max(1, H * m.k));
    }
    ctx.strokeStyle = "#0969da";
    ctx.lineWidth = 2;
    ctx.strokeRect(m.ox - view.x / view.k * m.k, m.oy - view.y / view.k * m.k, vw * m.k, vh * m.k);
    ctx.lineWidth = 1;
  }

  function minimapMove(e) {
    const m = minimapScale(), rect = minimap.getBoundingClientRect(), r = svg.getBoundingClientRect();
    const gx = (e.clientX - rect.left - m.ox) / m.k, gy = (e.clientY - rect.top - m.oy) / m.k;
    view.x = r.width / 2 - gx * view.k;
    view.y = r.height / 2 - gy * view.k;
    scheduleDraw();
  }

  // -- showing a graph, fitting, zooming ---------------------------------------------------

  function show(name, keepView) {
    current = prepare(name);
    matches = new Set();
    clearPath();
    layout = computeLayout(current);
    crumbs(name);
    if (!keepView) openView();
    scheduleDraw();
  }

  function relayout() {
    boxedChains(current);
    layout = computeLayout(current);
    if (path.nodes.length) setPath(path.nodes);
    scheduleDraw();
  }

  function fitScale() {
    const r = svg.getBoundingClientRect(), root = layout.root;
    return { r, root, k: Math.min(2, (r.width - 40) / Math.max(root.w, 1), (r.height - 40) / Math.max(root.h, 1)) };
  }

  // The whole graph in the window.
  function fit() {
    const { r, root, k } = fitScale();
    view.k = k;
    view.x = r.width / 2 - root.ax * k;
    view.y = (r.height - root.h * k) / 2 - root.ay * k;
    scheduleDraw();
  }

  // On opening: the whole graph if it is readable that way, else its top at a readable size.
  function openView() {
    const { r, root, k } = fitScale();
    if (k >= 0.5) return fit();
    view.k = Math.max(0.5, Math.min(1, (r.width - 40) / Math.max(root.w, 1)));
    view.x = r.width / 2 - root.ax * view.k;
    view.y = 20 - root.ay * view.k;
    scheduleDraw();
  }

  function zoom(factor, px, py) {
    const k = Math.min(4, Math.max(0.01, view.k * factor));
    view.x = px - (px - view.x) * (k / view.k);
    view.y = py - (py - view.y) * (k / view.k);
    view.k = k;
    scheduleDraw();
  }

  function center(it) {
    const r = svg.getBoundingClientRect();
    view.k = Math.max(view.k, 0.8);
    view.x = r.width / 2 - it.ax * view.k;
    view.y = r.height / 2 - (it.ay + H / 2) * view.k;
    scheduleDraw();
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

  // -- details ----------------------------------------------------------------------------

  function nodeLink(j) {
    const span = document.createElement("span");
    const a = document.createElement("a");
    a.textContent = current.nodes[j].n;
    a.onclick = () => reveal(j);
    span.appendChild(a);
    const s = document.createElement("span");
    s.className = "shape";
    s.textContent = " " + current.nodes[j].s;
    span.appendChild(s);
    return span;
  }

  function argValue(v) {
    if (typeof v === "number") return nodeLink(v);
    if (typeof v === "string") return document.createTextNode(v);
    const span = document.createElement("span");
    span.appendChild(document.createTextNode("["));
    v.forEach((x, k) => { if (k) span.appendChild(document.createTextNode(", ")); span.appendChild(argValue(x)); });
    span.appendChild(document.createTextNode("]"));
    return span;
  }

  function select(i) {
    selected = i;
    const n = current.nodes[i];
    const d = document.getElementById("details");
    d.textContent = "";
    const add = (tag, content) => { const e = document.createElement(tag); e.textContent = content; d.appendChild(e); return e; };
    add("h3", n.n);
    let dl = null;
    const section = title => { add("h4", title); dl = document.createElement("dl"); d.appendChild(dl); };
    const row = (label, value, cls, data) => {
      const dt = document.createElement("dt"); dt.textContent = label; dl.appendChild(dt);
      const dd = document.createElement("dd"); dd.className = cls || "";
      if (data) dd.dataset.arg = data;
      if (value instanceof Node) dd.appendChild(value); else dd.textContent = value;
      dl.appendChild(dd);
    };
    section("node");
    if (n.k === "call_function") {
      const parts = n.o.split(".");
      row("operator", parts.length === 3 ? parts.slice(0, 2).join(".") : n.o, "op");
      if (parts.length === 3) row("overload", parts[2], "overload");
    } else row("kind", n.o, "op");
    if (n.t) row("target", n.t, "target");
    const dtype = /^(\w+)\[/.exec(n.s);
    row("output", n.s, "shape output");
    if (dtype) row("dtype", dtype[1], "dtype");
    row("source", n.l >= 0 ? DATA.sources[n.l] : "\u2014", "source");
    row("module", current.chains[i].map(g => titleOf(DATA.groups[g])).join(" \u203a ") || "\u2014", "module");
    if (n.st) {
      section("values");
      for (const k of ["min", "max", "mean", "std", "sampled"]) if (n.st[k] !== undefined) row(k, n.st[k], "stat", k);
    }
    if (n.a && n.a.length) {
      section("arguments");
      for (const [name, value, isDefault] of n.a) {
        row(name, argValue(value), "arg" + (isDefault ? " default" : ""), name);
      }
    }
    section("graph");
    const list = idx => {
      const span = document.createElement("span");
      idx.forEach((j, k) => { if (k) span.appendChild(document.createTextNode(", ")); span.appendChild(nodeLink(j)); });
      return span;
    };
    row("inputs", list(n.i), "inputs");
    row("users", list(current.users[i]), "users");
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
    const weights = n.i.filter(j => current.nodes[j].w && !current.shownWeights.has(j));
    if (weights.length) {
      const b = add("button", `show its ${weights.length} weight${weights.length > 1 ? "s" : ""}`);
      b.id = "show-node-weights";
      b.onclick = () => { weights.forEach(j => current.shownWeights.add(j)); relayout(); select(i); };
    }
    const b = add("button", path.from >= 0 && path.from !== i ? `path from ${current.nodes[path.from].n} to here` : "path from here");
    b.id = "path-button";
    b.onclick = () => {
      if (path.from >= 0 && path.from !== i) showPath(path.from, i);
      else { clearPath(); path.from = i; select(i); }
    };
    scheduleDraw();
  }

  function reveal(i) {
    if (current.nodes[i].w) current.shownWeights.add(i);
    current.chains[i].forEach(g => current.collapsed.delete(g));
    relayout();
    center(layout.items.get("n" + i));
    select(i);
  }

  // -- search and paths -------------------------------------------------------------------

  function search(q) {
    q = q.trim().toLowerCase();
    const results = document.getElementById("results");
    results.textContent = "";
    matches = new Set();
    if (q) current.nodes.forEach((n, i) => {
      if (n.n.toLowerCase().includes(q) || n.o.toLowerCase().includes(q) ||
          (n.g >= 0 && DATA.groups[n.g].path.toLowerCase().includes(q))) matches.add(i);
    });
    if (q) {
      const head = document.createElement("div");
      head.textContent = `${matches.size} match${matches.size === 1 ? "" : "es"}`;
      results.appendChild(head);
      [...matches].slice(0, 50).forEach(i => {
        const div = document.createElement("div");
        div.appendChild(nodeLink(i));
        div.appendChild(document.createTextNode(" " + shortOp(current.nodes[i])));
        results.appendChild(div);
      });
    }
    scheduleDraw();
  }

  // The shortest path of data flow from a to b (or b to a); failing both, through the graph
  // in either direction.
  function findPath(a, b) {
    const bfs = (src, dst, next) => {
      const prev = new Map([[src, -1]]), queue = [src];
      for (let q = 0; q < queue.length; q++) {
        const u = queue[q];
        if (u === dst) break;
        for (const v of next(u)) if (!prev.has(v)) { prev.set(v, u); queue.push(v); }
      }
      if (!prev.has(dst)) return null;
      const out = [];
      for (let u = dst; u !== -1; u = prev.get(u)) out.unshift(u);
      return out;
    };
    const g = current, downstream = u => g.users[u];
    const forward = bfs(a, b, downstream);
    if (forward) return forward;
    const backward = bfs(b, a, downstream);
    if (backward) return backward.reverse();
    return bfs(a, b, u => g.users[u].concat(g.nodes[u].i));
  }

  function showPath(a, b) {
    const nodes = findPath(a, b) || [];
    path.from = -1;
    setPath(nodes);
    const bar = document.getElementById("pathbar");
    bar.textContent = nodes.length ? `path ${current.nodes[a].n} \u2192 ${current.nodes[b].n}: ${nodes.length} nodes `
                                   : `no path between ${current.nodes[a].n} and ${current.nodes[b].n} `;
    const clear = document.createElement("button");
    clear.textContent = "clear";
    clear.onclick = () => { clearPath(); scheduleDraw(); };
    bar.appendChild(clear);
    select(b);
    return nodes.map(i => current.nodes[i].n);
  }

  function setPath(nodes) {
    path.nodes = nodes;
    path.items = new Set();
    path.edges = new Set();
    const reps = nodes.map(i => layout.rep[i]).filter(r => r !== null);
    reps.forEach(r => path.items.add(r));
    for (let k = 1; k < reps.length; k++) if (reps[k - 1] !== reps[k]) path.edges.add(reps[k - 1] + "|" + reps[k]);
  }

  function clearPath() {
    path = { from: -1, nodes: [], items: new Set(), edges: new Set() };
    const bar = document.getElementById("pathbar");
    if (bar) bar.textContent = "";
  }

  // -- export -----------------------------------------------------------------------------

  // The current view as a standalone SVG document (what is in the window, with the page's style).
  function exportSVG() {
    const r = svg.getBoundingClientRect();
    const copy = svg.cloneNode(true);
    copy.setAttribute("width", r.width);
    copy.setAttribute("height", r.height);
    copy.setAttribute("viewBox", `0 0 ${r.width} ${r.height}`);
    const style = document.createElementNS(SVG_NS, "style");
    style.textContent = document.getElementById("viewer-style").textContent +
      "\ntext { font-family: system-ui, sans-serif; }";
    copy.insertBefore(style, copy.firstChild);
    const bg = el("rect", { x: 0, y: 0, width: r.width, height: r.height, fill: "#f6f8fa" });
    copy.insertBefore(bg, style.nextSibling);
    return new XMLSerializer().serializeToString(copy);
  }

  function exportPNG() {
    const r = svg.getBoundingClientRect(), scale = 2;
    const image = new Image();
    const url = URL.createObjectURL(new Blob([exportSVG()], { type: "image/svg+xml" }));
    return new Promise((resolve, reject) => {
      image.onload = () => {
        const c = document.createElement("canvas");
        c.width = r.width * scale; c.height = r.height * scale;
        const ctx = c.getContext("2d");
        ctx.scale(scale, scale);
        ctx.drawImage(image, 0, 0);
        URL.revokeObjectURL(url);
        resolve(c.toDataURL("image/png"));
      };
      image.onerror = reject;
      image.src = url;
    });
  }

  function download(name, href) {
    const a = document.createElement("a");
    a.href = href;
    a.download = name;
    document.body.appendChild(a);
    a.click();
    a.remove();
  }

  const fileBase = () => (DATA.title || "graph").replace(/\.[^.]*$/, "").replace(/[^\w.-]+/g, "_");

  // -- interaction ------------------------------------------------------------------------

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

  // Collapse or expand a module, keeping its top left where it was on screen.
  function toggle(group, collapse) {
    const before = anchor(group);
    if (collapse) current.collapsed.add(group); else current.collapsed.delete(group);
    relayout();
    const after = anchor(group);
    if (before && after) { view.x += (before[0] - after[0]) * view.k; view.y += (before[1] - after[1]) * view.k; }
    scheduleDraw();
  }

  function anchor(group) {
    const it = layout.items.get("g" + group) || layout.items.get("b" + group);
    return it ? [it.ax - it.w / 2, it.ay] : null;
  }

  svg.addEventListener("wheel", e => {
    e.preventDefault();
    const r = svg.getBoundingClientRect();
    zoom(Math.exp(-e.deltaY * 0.0015), e.clientX - r.left, e.clientY - r.top);
  }, { passive: false });
  let minimapDrag = false;
  minimap.addEventListener("mousedown", e => { e.stopPropagation(); minimapDrag = true; minimapMove(e); });
  window.addEventListener("mousemove", e => { if (minimapDrag) minimapMove(e); });
  window.addEventListener("mouseup", () => { minimapDrag = false; });
  const zoomCenter = f => { const r = svg.getBoundingClientRect(); zoom(f, r.width / 2, r.height / 2); };
  document.getElementById("zoom-in").onclick = () => zoomCenter(1.25);
  document.getElementById("zoom-out").onclick = () => zoomCenter(0.8);
  document.getElementById("search").addEventListener("input", e => search(e.target.value));
  document.getElementById("fit").onclick = () => fit();
  document.getElementById("expand-all").onclick = () => { current.collapsed.clear(); relayout(); };
  document.getElementById("collapse-all").onclick = () => { current.groups.forEach(k => current.collapsed.add(k)); relayout(); };
  const weightsButton = document.getElementById("weights");
  weightsButton.onclick = () => {
    const all = current.nodes.map((n, i) => n.w ? i : -1).filter(i => i >= 0);
    const showing = all.length && all.every(i => current.shownWeights.has(i));
    current.shownWeights = new Set(showing ? [] : all);
    weightsButton.classList.toggle("on", !showing);
    weightsButton.textContent = showing ? "show weights" : "hide weights";
    relayout();
  };
  document.getElementById("export-svg").onclick = () => {
    const url = URL.createObjectURL(new Blob([exportSVG()], { type: "image/svg+xml" }));
    download(fileBase() + ".svg", url);
    setTimeout(() => URL.revokeObjectURL(url), 1000);
  };
  document.getElementById("export-png").onclick = () => exportPNG().then(href => download(fileBase() + ".png", href));
  window.addEventListener("resize", scheduleDraw);

  show("main");
  window.graphportViewer = { show, select, reveal, toggle, search, fit, zoom, showPath, exportSVG, exportPNG, view,
                             get layout() { return layout; }, get graph() { return current; } };
})();
