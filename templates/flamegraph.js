/* wallflame flame graph: a flame tree drawn into a canvas, with zoom, search and tooltips.
 *
 * Shared by every wallflame page (report, diff).  A page hands in a tree as parallel arrays
 * (parents always before their children) plus a value per node and a colour callback; this
 * file does not know what the numbers mean.  Names reach the DOM only through textContent,
 * never as markup.  Tree building, layout and search are iterative (explicit stacks), so a
 * 10,000-frame stack costs what its frames cost, and only frames at least `minWidth` pixels
 * wide are laid out, so a 100,000-node profile stays responsive.
 */
"use strict";

var WF = (function () {
  var NAME_CAP = 300;

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }

  /* Cap a (display-safe) name for labels and tooltips; the details pane shows it whole. */
  function cap(s, n) {
    n = n || NAME_CAP;
    return s.length > n ? s.slice(0, n) + "\u2026" : s;
  }

  /* ---- trees ------------------------------------------------------------------------- */

  /* The embedded flat tree: {names, name, parent, self: [node, class, value, ...], classes}. */
  function fromFlat(d) {
    var n = d.parent.length, nc = d.classes.length;
    var t = {
      n: n, nc: nc, names: d.names.slice(), nameIndex: new Map(),
      nameId: Int32Array.from(d.name), parent: Int32Array.from(d.parent),
      self: new Float64Array(n * nc)
    };
    for (var i = 0; i < t.names.length; i++) t.nameIndex.set(t.names[i], i);
    var s = d.self;
    for (var k = 0; k + 2 < s.length; k += 3) t.self[s[k] * nc + s[k + 1]] += s[k + 2];
    return t;
  }

  function intern(base, name) {
    var i = base.nameIndex.get(name);
    if (i === undefined) {
      i = base.names.length;
      base.names.push(name);
      base.nameIndex.set(name, i);
    }
    return i;
  }

  /* ---- kernel frames folded into one ------------------------------------------------ */

  var KERNEL_ENTRY = /^(entry_SYSCALL|asm_exc_|asm_sysvec_|asm_common_interrupt|ret_from_fork)/;
  var PSEUDO = /^\[.*\]$/;
  var SYSCALL = /^__(?:x64|ia32|arm64)_sys_(\w+)|^asm_exc_(\w+)|^asm_sysvec_(\w+)/;
  var MACHINERY = /^(__?schedule|schedule(_\w+)?|preempt_schedule\w*|io_schedule\w*|do_syscall_64|entry_SYSCALL\w*|syscall_exit\w*|__x64_sys_\w+|__ia32_sys_\w+|__arm64_sys_\w+|__do_sys_\w+|__se_sys_\w+|x64_sys_call|asm_\w+|exc_\w+|irqentry_\w+|finish_task_switch\w*|context_switch)(_\[k\])?$/;

  /* `base` with each run of kernel frames (from the kernel's entry point, or frames marked
   * `_[k]`, to the last kernel frame) folded into one frame naming the system call or
   * exception and the kernel function that waited: `[kernel] futex_do_wait (futex)`.
   * Returns the folded tree (names interned into `base`) and `map`: the folded node that
   * takes each node's self time (see foldSelf). */
  function foldKernel(base) {
    var n = base.n, nc = base.nc, names = base.names, bn = base.nameId, bp = base.parent;
    var isK = new Uint8Array(n), entry = new Array(n), wait = new Array(n);
    var anchor = new Int32Array(n), map = new Int32Array(n);
    var parent = [-1], nameId = [0], keyOf = new Map();
    function child(p, id) {
      var key = p * 4194304 + id, m = keyOf.get(key);
      if (m === undefined) { m = parent.length; keyOf.set(key, m); parent.push(p); nameId.push(id); }
      return m;
    }
    function label(e, w) {
      return "[kernel] " + (w ? w + (e ? " (" + e + ")" : "") : e || "frames");
    }
    for (var i = 1; i < n; i++) {
      var p = bp[i], name = names[bn[i]];
      /* a bracketed name ([mutex ...], the wait's pseudo-frame) ends the kernel's run */
      if (p > 0 && isK[p] && !PSEUDO.test(name) || KERNEL_ENTRY.test(name) || /_\[k\]$/.test(name)) {
        isK[i] = 1;
        var inK = p > 0 && isK[p];
        entry[i] = inK ? entry[p] : "";
        wait[i] = inK ? wait[p] : "";
        anchor[i] = inK ? anchor[p] : map[p];
        var m = SYSCALL.exec(name);
        if (m) entry[i] = m[1] || m[2] || m[3];
        else if (!MACHINERY.test(name)) wait[i] = name.replace(/_\[k\]$/, "");
        map[i] = child(anchor[i], intern(base, label(entry[i], wait[i])));
      } else {
        map[i] = child(map[p], bn[i]);  /* below a kernel run: under its folded frame */
      }
    }
    var vn = parent.length, self = new Float64Array(vn * nc);
    foldSelf(map, base.self, self, nc);
    return { tree: { n: vn, nc: nc, names: base.names, nameIndex: base.nameIndex,
      nameId: Int32Array.from(nameId), parent: Int32Array.from(parent), self: self }, map: map };
  }

  /* Add each node's self time (`from`, per class) to its folded node's (`into`). */
  function foldSelf(map, from, into, nc) {
    into.fill(0);
    for (var i = 0; i < map.length; i++) {
      var o = map[i] * nc, b = i * nc;
      for (var c = 0; c < nc; c++) into[o + c] += from[b + c];
    }
    return into;
  }

  /* A view of `base` in which the nodes just below the root are re-keyed by
   * `rootKey(node)`: a name id (nodes with the same id merge, their subtrees too) or -1
   * (the level disappears: its children merge under the root).  Returns a tree with
   * per-class totals `total` (n * nc). */
  function regroup(base, rootKey) {
    var n = base.n, nc = base.nc;
    var map = new Int32Array(n), parent = [-1], nameId = [0], keyOf = new Map();
    var bp = base.parent, bn = base.nameId, i, p, id, key, m;
    map[0] = 0;
    for (i = 1; i < n; i++) {
      p = bp[i];
      if (p === 0) {
        id = rootKey(i);
        if (id < 0) { map[i] = 0; continue; }
        p = 0;
      } else {
        p = map[p];
        id = bn[i];
      }
      key = p * 4194304 + id;
      m = keyOf.get(key);
      if (m === undefined) {
        m = parent.length;
        keyOf.set(key, m);
        parent.push(p);
        nameId.push(id);
      }
      map[i] = m;
    }
    var vn = parent.length, total = new Float64Array(vn * nc), bs = base.self;
    for (i = 0; i < n; i++) {
      var o = map[i] * nc, b = i * nc;
      for (var c = 0; c < nc; c++) total[o + c] += bs[b + c];
    }
    var vp = Int32Array.from(parent);
    for (i = vn - 1; i > 0; i--) {
      var to = vp[i] * nc, fo = i * nc;
      for (c = 0; c < nc; c++) total[to + c] += total[fo + c];
    }
    return { n: vn, nc: nc, names: base.names, parent: vp, nameId: Int32Array.from(nameId),
             total: total };
  }

  /* Children of every node as CSR arrays, each parent's children sorted by name. */
  function children(tree) {
    var n = tree.n, start = new Int32Array(n + 1), list = new Int32Array(Math.max(n - 1, 0));
    var i, names = tree.names, nameId = tree.nameId;
    for (i = 1; i < n; i++) start[tree.parent[i] + 1]++;
    for (i = 0; i < n; i++) start[i + 1] += start[i];
    var fill = start.slice(0, n);
    for (i = 1; i < n; i++) list[fill[tree.parent[i]]++] = i;
    var cmp = function (a, b) {
      var x = names[nameId[a]], y = names[nameId[b]];
      return x < y ? -1 : x > y ? 1 : a - b;
    };
    for (i = 0; i < n; i++) {
      if (start[i + 1] - start[i] > 1) {
        var seg = Array.prototype.slice.call(list, start[i], start[i + 1]).sort(cmp);
        list.set(seg, start[i]);
      }
    }
    return { start: start, list: list };
  }

  /* Sum of the classes in `mask` (array of booleans), per node. */
  function values(tree, mask) {
    var v = new Float64Array(tree.n), nc = tree.nc, t = tree.total;
    for (var i = 0; i < tree.n; i++) {
      var s = 0, o = i * nc;
      for (var c = 0; c < nc; c++) if (mask[c]) s += t[o + c];
      v[i] = s;
    }
    return v;
  }

  function pathOf(tree, node) {
    var path = [];
    while (node > 0) { path.push(tree.nameId[node]); node = tree.parent[node]; }
    return path.reverse();
  }

  /* The node a path of name ids leads to (the deepest one that exists with a value). */
  function findPath(tree, kids, value, path) {
    var node = 0;
    for (var k = 0; k < path.length; k++) {
      var found = -1;
      for (var j = kids.start[node]; j < kids.start[node + 1]; j++) {
        var c = kids.list[j];
        if (tree.nameId[c] === path[k] && value[c] > 0) { found = c; break; }
      }
      if (found < 0) break;
      node = found;
    }
    return node;
  }

  /* ---- the canvas renderer ------------------------------------------------------------ */

  function Flame(host, opts) {
    this.opts = opts;
    this.rowH = opts.rowHeight || 16;
    this.minW = opts.minWidth || 0.4;
    host.classList.add("wf-flame");
    this.scroll = el("div", "wf-scroll");
    this.canvas = el("canvas");
    this.spacer = el("div", "wf-spacer");
    this.scroll.appendChild(this.canvas);
    this.scroll.appendChild(this.spacer);
    host.appendChild(this.scroll);
    this.empty = el("p", "wf-empty");
    host.appendChild(this.empty);
    this.tip = opts.tooltipEl;
    this.ctx = this.canvas.getContext("2d");
    this.zoomNode = 0;
    this.hover = -1;
    this.selected = -1;
    this.match = null;
    var self = this;
    this.scroll.addEventListener("scroll", function () { self.draw(); }, { passive: true });
    this.canvas.addEventListener("mousemove", function (e) { self.onMove(e); });
    this.canvas.addEventListener("mouseleave", function () { self.setHover(-1, null); });
    this.canvas.addEventListener("click", function (e) {
      var node = self.hit(e);
      if (node >= 0 && self.opts.onClick) self.opts.onClick(self, node, e);
    });
  }

  Flame.prototype.setData = function (tree, kids, value) {
    this.tree = tree;
    this.kids = kids;
    this.value = value;
    this.match = null;
    this.hover = -1;
    this.selected = -1;
    this.zoomNode = 0;
  };

  Flame.prototype.total = function () { return this.value ? this.value[0] : 0; };

  Flame.prototype.layout = function () {
    var W = Math.max(this.scroll.clientWidth, 100), tree = this.tree, value = this.value;
    this.W = W;
    var vn = [], vx = [], vw = [], vd = [], anc = [];
    var z = this.zoomNode, p = z;
    while (p > 0) { p = tree.parent[p]; anc.push(p); }
    anc.reverse();
    var base = anc.length, total = value[z];
    for (var a = 0; a < anc.length; a++) { vn.push(anc[a]); vx.push(0); vw.push(W); vd.push(a); }
    this.ancestors = base;
    if (total > 0) {
      var scale = W / total, minW = this.minW, start = this.kids.start, list = this.kids.list;
      var sn = [z], sx = [0], sd = [base];
      while (sn.length) {
        var node = sn.pop(), x = sx.pop(), d = sd.pop(), w = value[node] * scale;
        vn.push(node); vx.push(x); vw.push(w); vd.push(d);
        for (var j = start[node]; j < start[node + 1]; j++) {
          var c = list[j], cw = value[c] * scale;
          if (cw >= minW) { sn.push(c); sx.push(x); sd.push(d + 1); }
          x += cw;
        }
      }
    }
    var rows = 0, i;
    for (i = 0; i < vd.length; i++) if (vd[i] + 1 > rows) rows = vd[i] + 1;
    var count = new Int32Array(rows + 1);
    for (i = 0; i < vd.length; i++) count[vd[i] + 1]++;
    for (i = 0; i < rows; i++) count[i + 1] += count[i];
    var order = new Int32Array(vd.length), fill = count.slice(0, rows);
    for (i = 0; i < vd.length; i++) order[fill[vd[i]]++] = i;
    for (var r = 0; r < rows; r++) {  // each row by x, for hit testing
      var seg = Array.prototype.slice.call(order, count[r], count[r + 1]);
      seg.sort(function (u, v) { return vx[u] - vx[v]; });
      order.set(seg, count[r]);
    }
    this.vis = { n: vn, x: vx, w: vw, d: vd, rowStart: count, order: order, rows: rows };
    var h = Math.max(rows, 1) * this.rowH;
    var viewH = Math.min(h, this.opts.maxHeight || 560);
    var dpr = window.devicePixelRatio || 1;
    this.canvas.width = Math.round(W * dpr);
    this.canvas.height = Math.round(viewH * dpr);
    this.canvas.style.width = W + "px";
    this.canvas.style.height = viewH + "px";
    this.spacer.style.height = (h - viewH) + "px";
    this.viewH = viewH;
    this.empty.textContent = total > 0 ? "" : (this.opts.emptyText || "nothing to show");
  };

  Flame.prototype.draw = function () {
    if (!this.vis) return;
    var ctx = this.ctx, dpr = window.devicePixelRatio || 1, rowH = this.rowH, vis = this.vis;
    var top = this.scroll.scrollTop, viewH = this.viewH;
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, this.W, viewH);
    ctx.font = "12px system-ui, sans-serif";
    ctx.textBaseline = "middle";
    if (!this.charW) this.charW = ctx.measureText("abcdefghijklmnopqrstuvwxyz_:").width / 28;
    var first = Math.max(0, Math.floor(top / rowH)), last = Math.min(vis.rows - 1,
      Math.floor((top + viewH) / rowH));
    var tree = this.tree, names = tree.names, color = this.opts.color, match = this.match;
    for (var r = first; r <= last; r++) {
      var y = r * rowH - top;
      for (var k = vis.rowStart[r]; k < vis.rowStart[r + 1]; k++) {
        var i = vis.order[k], node = vis.n[i], x = vis.x[i], w = vis.w[i];
        var isAnc = vis.d[i] < this.ancestors;
        ctx.globalAlpha = isAnc ? 0.55 : 1;
        ctx.fillStyle = match && match[node] ? this.opts.matchColor || "#e040fb" : color(node);
        ctx.fillRect(x, y, Math.max(w - 0.5, 0.5), rowH - 1);
        if (node === this.hover || node === this.selected) {
          ctx.strokeStyle = node === this.selected ? "#000" : "#333";
          ctx.lineWidth = node === this.selected ? 2 : 1;
          ctx.strokeRect(x + 0.5, y + 0.5, Math.max(w - 1.5, 0.5), rowH - 2);
        }
        if (w > 3 * this.charW + 6) {
          var label = node === 0 ? (this.opts.rootName || "all") : names[tree.nameId[node]];
          var fit = Math.floor((w - 6) / this.charW);
          if (label.length > fit) label = label.slice(0, Math.max(fit - 1, 1)) + "\u2026";
          ctx.fillStyle = "#111";
          ctx.fillText(label, x + 3, y + rowH / 2);
        }
      }
    }
    ctx.globalAlpha = 1;
  };

  Flame.prototype.render = function () { this.layout(); this.reveal(); this.draw(); };

  /* Keep the zoomed frame's row in view (after a zoom restored from the URL, or zooming out
   * of a deep stack), scrolling only when it is not visible already. */
  Flame.prototype.reveal = function () {
    var row = this.ancestors, top = this.scroll.scrollTop, rowH = this.rowH;
    if (row * rowH < top || (row + 1) * rowH > top + this.viewH) {
      this.scroll.scrollTop = Math.max(0, (row - 2) * rowH);
    }
  };

  Flame.prototype.hit = function (e) {
    if (!this.vis) return -1;
    var rect = this.canvas.getBoundingClientRect();
    var x = e.clientX - rect.left, y = e.clientY - rect.top + this.scroll.scrollTop;
    var r = Math.floor(y / this.rowH), vis = this.vis;
    if (r < 0 || r >= vis.rows) return -1;
    var lo = vis.rowStart[r], hi = vis.rowStart[r + 1] - 1;
    while (lo <= hi) {  // the last frame in the row starting at or before x
      var mid = (lo + hi) >> 1;
      if (vis.x[vis.order[mid]] <= x) lo = mid + 1; else hi = mid - 1;
    }
    if (hi < vis.rowStart[r]) return -1;
    var i = vis.order[hi];
    return x < vis.x[i] + vis.w[i] ? vis.n[i] : -1;
  };

  Flame.prototype.onMove = function (e) { this.setHover(this.hit(e), e); };

  Flame.prototype.setHover = function (node, e) {
    if (node !== this.hover) { this.hover = node; this.draw(); }
    var tip = this.tip;
    if (!tip) return;
    if (node < 0 || !e) { tip.hidden = true; return; }
    tip.textContent = "";
    var lines = this.opts.tooltip(this, node);
    for (var k = 0; k < lines.length; k++) tip.appendChild(el("div", k ? "" : "wf-tip-name",
      cap(lines[k])));
    tip.hidden = false;
    var x = e.clientX + 14, y = e.clientY + 14;
    var tw = tip.offsetWidth, th = tip.offsetHeight;
    if (x + tw > window.innerWidth - 4) x = Math.max(4, e.clientX - tw - 14);
    if (y + th > window.innerHeight - 4) y = Math.max(4, e.clientY - th - 14);
    tip.style.left = x + "px";
    tip.style.top = y + "px";
  };

  Flame.prototype.zoomTo = function (node) {
    this.zoomNode = node > 0 && this.value[node] > 0 ? node : 0;
    this.render();
  };

  Flame.prototype.select = function (node) { this.selected = node; this.draw(); };

  /* Which nodes of `tree` have a name matching `re`: `match` (the node itself), `top` (a
   * match with no matching ancestor: what "matched %" sums, so nesting is counted once) and
   * `under` (the node or an ancestor matches).  Graphs that share a tree share this. */
  function matchNodes(tree, re) {
    var n = tree.n, byName = new Int8Array(tree.names.length).fill(-1);
    var match = new Uint8Array(n), top = new Uint8Array(n), under = new Uint8Array(n);
    for (var i = 1; i < n; i++) {
      var id = tree.nameId[i], m = byName[id];
      if (m < 0) m = byName[id] = re.test(tree.names[id]) ? 1 : 0;
      var p = tree.parent[i];
      match[i] = m;
      if (m && !under[p]) top[i] = 1;
      under[i] = under[p] | m;
    }
    return { match: match, top: top, under: under };
  }

  /* Mark names matching `re` (null: clear).  Returns the matched value, counted once even
   * when matches nest, within the whole view and within the zoomed frame.  `shared` is a
   * `matchNodes` result for this tree, when the caller computed it for several graphs. */
  Flame.prototype.search = function (re, shared) {
    var value = this.value, n = this.tree.n, z = this.zoomNode;
    if (!re) { this.match = null; this.draw(); return null; }
    var m = shared || matchNodes(this.tree, re), top = m.top, all = 0, zoomed = 0, i;
    for (i = 1; i < n; i++) if (top[i]) all += value[i];
    if (m.under[z] && z > 0) {
      zoomed = value[z];
    } else {  // the zoomed subtree only, not descending below a counted match
      var stack = [z], start = this.kids.start, list = this.kids.list;
      while (stack.length) {
        var node = stack.pop();
        for (var j = start[node]; j < start[node + 1]; j++) {
          var c = list[j];
          if (value[c] <= 0) continue;
          if (top[c]) zoomed += value[c]; else stack.push(c);
        }
      }
    }
    this.match = m.match;
    this.draw();
    return { all: all, zoomed: zoomed, total: value[0], zoomTotal: value[z] };
  };

  return {
    el: el, cap: cap, fromFlat: fromFlat, intern: intern, regroup: regroup,
    foldKernel: foldKernel, foldSelf: foldSelf,
    children: children, values: values, pathOf: pathOf, findPath: findPath,
    matchNodes: matchNodes, Flame: Flame
  };
})();
