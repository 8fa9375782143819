/* wallflame report page: wires the embedded profile to three flame graphs (merged, on-CPU,
 * off-CPU) that share search, zoom and thread grouping; keeps that state in the URL hash.
 * Every name is shown through textContent (WF.el); nothing here builds markup from data. */
"use strict";

(function () {
  var data = JSON.parse(document.getElementById("wf-data").textContent);
  var flat = data.flame, classes = flat.classes, nc = classes.length, unit = flat.unit;
  /* the tree as embedded (every frame), and with each run of kernel frames folded into one
   * (the default view; `k` expands them); `base` is the one shown */
  var full = WF.fromFlat(flat), folded = WF.foldKernel(full), base = folded.tree;
  var threadsFull = new Map(), threadsFolded = new Map();
  flat.threads.forEach(function (t) {
    threadsFull.set(t[0], { tid: t[1], name: t[2] });
    threadsFolded.set(folded.map[t[0]], { tid: t[1], name: t[2] });
  });
  var threadOf = threadsFolded;
  /* each thread's group (its name pattern, or its role when its name is the process's) */
  var groupsEl = document.getElementById("wf-groups");
  var GROUPS = groupsEl ? JSON.parse(groupsEl.textContent) : {};
  /* each class's label and colour: the one table (wallflame/waitclasses.py), no copy here */
  var TABLE = data.classes, FALLBACK = TABLE[data.class_fallback];
  var MASKS = {
    both: classes.map(function () { return true; }),
    on: classes.map(function (c) { return c === "on"; }),
    off: classes.map(function (c) { return c !== "on"; })
  };
  var $ = function (id) { return document.getElementById(id); };
  var tip = $("wf-tip");
  var state = { view: "both", threads: "group", q: "", z: [], sel: [], range: null, kernel: false };
  var vt = null, kids = null;

  document.documentElement.classList.add("js");

  /* ---- numbers and colours ---- */
  function fmt(v) {  /* as wallflame/amounts.py readable() (a browser test holds them equal) */
    if (unit !== "ns") return Math.round(v).toLocaleString("en-US") + " samples";
    var s = v / 1e9;
    if (v === 0) return "0 s";
    if (s >= 100) return s.toFixed(1) + " s";
    if (s >= 1) return s.toFixed(3) + " s";
    if (s >= 0.001) return (s * 1e3).toFixed(2) + " ms";
    return (s * 1e6).toFixed(1) + " \u00b5s";
  }
  function pct(a, b) { return b > 0 ? (100 * a / b).toFixed(a === b ? 0 : 2) + "%" : "-"; }

  function hash(s) {
    var h = 2166136261;
    for (var i = 0; i < s.length && i < 64; i++) { h ^= s.charCodeAt(i); h = Math.imul(h, 16777619); }
    return (h >>> 0) / 4294967296;
  }
  function rgb(r, g, b) { return "rgb(" + (r | 0) + "," + (g | 0) + "," + (b | 0) + ")"; }
  function paint(cls, v, w) {
    /* channel = base + spread * (seed ? w : v), as report/palette.py computes it */
    var ch = (TABLE[cls] || FALLBACK).colour;
    return rgb(ch[0][0] + ch[0][1] * (ch[0][2] ? w : v), ch[1][0] + ch[1][1] * (ch[1][2] ? w : v),
      ch[2][0] + ch[2][1] * (ch[2][2] ? w : v));
  }
  function dominant(node, mask) {
    var best = -1, bv = -1, o = node * nc;
    for (var c = 0; c < nc; c++) if (mask[c] && vt.total[o + c] > bv) { bv = vt.total[o + c]; best = c; }
    return best < 0 ? data.class_fallback : classes[best];
  }
  function colorFor(mask) {
    var cache = new Map();
    return function (node) {
      if (node === 0) return "rgb(230,230,225)";
      if (vt.parent[node] === 0 && state.threads !== "merged") return "rgb(214,214,204)";
      var cls = dominant(node, mask), id = vt.nameId[node], key = id * 16 + classes.indexOf(cls);
      var c = cache.get(key);
      if (c === undefined) {
        var name = vt.names[id], v = hash(name), w = hash(name + "\u0001");
        var mark = cls === "on" && name.slice(-4);
        if (mark === "_[k]") c = rgb(230 + 20 * v, 120 + 50 * w, 30);  // kernel, as flamegraph.pl
        else if (mark === "_[i]") c = rgb(90 + 40 * v, 200 + 30 * w, 200 + 30 * w);  // inlined
        else if (mark === "_[j]") c = rgb(80 + 40 * v, 190 + 40 * w, 80);  // JIT
        else c = paint(cls, v, w);
        cache.set(key, c);
      }
      return c;
    };
  }

  /* ---- graphs ---- */
  function tooltip(g, node) {
    var name = node === 0 ? "all" : vt.names[vt.nameId[node]], v = g.value[node];
    var lines = [name, fmt(v) + " \u2014 " + pct(v, g.value[0]) + " of this graph" +
      (g.zoomNode > 0 ? ", " + pct(v, g.value[g.zoomNode]) + " of the zoomed frame" : "")];
    lines.push(breakdown(node, g.mask).slice(0, 4).join(" \u00b7 "));
    return lines;
  }
  function breakdown(node, mask) {
    var parts = [], o = node * nc, sum = 0, c;
    for (c = 0; c < nc; c++) if (mask[c]) sum += vt.total[o + c];
    var order = classes.map(function (_, k) { return k; }).filter(function (k) {
      return mask[k] && vt.total[o + k] > 0;
    }).sort(function (a, b) { return vt.total[o + b] - vt.total[o + a]; });
    for (c = 0; c < order.length; c++) {
      var k = order[c];
      parts.push((TABLE[classes[k]] || FALLBACK).label + " " + fmt(vt.total[o + k]) + " (" + pct(vt.total[o + k], sum) + ")");
    }
    return parts;
  }
  function onClick(g, node) {
    state.z = WF.pathOf(vt, node);
    state.sel = state.z;
    applyZoom();
    showDetails(g, node);
    saveHash();
  }
  function makeGraph(id, mask, empty) {
    var g = new WF.Flame($(id), { color: colorFor(mask), tooltip: tooltip, onClick: onClick,
      tooltipEl: tip, matchColor: "#35d435", emptyText: empty, maxHeight: id === "fg-main" ? 600 : 420 });
    g.mask = mask;
    return g;
  }
  var graphs = {
    main: makeGraph("fg-main", MASKS.both, "no samples in this view"),
    on: makeGraph("fg-on", MASKS.on, "no on-CPU samples"),
    off: makeGraph("fg-off", MASKS.off, "no off-CPU evidence")
  };

  /* ---- who made them wait: the critical path of the waits (a tree of its own, the whole
   * window; the search applies to it too) ---- */
  var blame = null;
  if (data.blame) {
    var bBase = WF.fromFlat(data.blame);
    var bTree = WF.regroup(bBase, function (node) { return bBase.nameId[node]; });
    var bKids = WF.children(bTree);
    var bValue = WF.values(bTree, data.blame.classes.map(function () { return true; }));
    var bColour = function (node) {
      if (node === 0) return "rgb(230,230,225)";
      var name = bTree.names[bTree.nameId[node]];
      if (/^woken by |^\[/.test(name)) return "rgb(190,200,214)";  // the chain's own frames
      return paint("on", hash(name), hash(name + "\u0001"));
    };
    blame = new WF.Flame($("fg-blame"), {
      color: bColour, tooltipEl: tip, matchColor: "#35d435", maxHeight: 500,
      emptyText: "no wait ended by a recorded wake-up",
      tooltip: function (g, node) {
        var v = g.value[node];
        return [node === 0 ? "all waits" : bTree.names[bTree.nameId[node]],
          fmt(v) + " \u2014 " + pct(v, g.value[0]) + " of the time waited"];
      },
      onClick: function (g, node) { g.zoomTo(node); }
    });
    blame.opts.rootName = "all waits";
    blame.setData(bTree, bKids, bValue);
    $("blame").hidden = false;
    $("tot-blame").textContent = fmt(blame.total());
    blame.render();
  }

  /* ---- the timeline: a range selected in it restricts every graph ---- */
  /* runnable is a class of the table: drawn in its colour, like the wait classes */
  var STATE_COLOURS = { stopped: "rgb(150,150,150)", unsampled: "rgb(184,196,214)" };
  var wholeSelf = full.self, timeline = null, tlData = data.timeline;
  var TABLE_BLOCKED = classes.filter(function (c) { return TABLE[c] && TABLE[c].blocked; });
  function seconds(ns) { return (ns / 1e9).toFixed(3) + " s"; }
  function stackOf(node) {
    var out = [];
    while (node > 0 && full.parent[node] > 0) { out.push(full.names[full.nameId[node]]); node = full.parent[node]; }
    return out;
  }
  if (tlData && tlData.threads.length) {
    $("timeline").hidden = false;
    timeline = new WF.Timeline($("tl-host"), tlData, {
      colour: function (k) { return STATE_COLOURS[k] || paint(k, 0.5, 0.5); },
      fmt: fmt, seconds: seconds, stackOf: stackOf, tipEl: tip,
      onRange: function (r) { state.range = r; applyRange(); saveHash(); }
    });
    $("tl-clear").addEventListener("click", function () { timeline.select(null, null); });
  }
  function applyRange() {
    var r = timeline && state.range;
    full.self = r ? timeline.selfs(r[0], r[1], full.n, nc) : wholeSelf;
    WF.foldSelf(folded.map, full.self, folded.tree.self, nc);
    base = state.kernel ? full : folded.tree;
    threadOf = state.kernel ? threadsFull : threadsFolded;
    if (timeline) {
      timeline.select(r ? r[0] : null, r ? r[1] : null, true);
      $("tl-range").textContent = r ? "Range " + seconds(r[0] + tlData.offset) + " \u2013 " +
        seconds(r[1] + tlData.offset) + " (" + fmt(r[1] - r[0]) + "): the graphs show only it." : "";
      $("tl-clear").hidden = !r;
      rangeTable(r);
    }
    rebuild();
  }
  /* the per-thread table of the range (each cell's whole-window text kept to go back to) */
  function rangeTable(r) {
    var t = r ? timeline.totals(r[0], r[1]) : null, all = { on: 0 };
    if (t) for (var tid in t) for (var k in t[tid]) all[k] = (all[k] || 0) + t[tid][k];
    document.querySelectorAll("#threads tr[data-tid], #threads tr[data-tids]").forEach(function (tr) {
      var row = t && (tr.dataset.tids ? groupRow(t, tr.dataset.tids.split(" "), r) :
        tr.dataset.tid === "all" ? all : t[tr.dataset.tid]);
      var bar = tr.querySelector("svg.bar");
      if (bar) bar.style.visibility = t ? "hidden" : "";
      tr.querySelectorAll("[data-k]").forEach(function (td) {
        if (td.dataset.whole === undefined) td.dataset.whole = td.textContent;
        if (!t) { td.textContent = td.dataset.whole; return; }
        if (!row) { td.textContent = "-"; return; }
        var k = td.dataset.k, blocked = 0;
        TABLE_BLOCKED.forEach(function (c) { blocked += row[c] || 0; });
        var v = k === "blocked" ? blocked + (row.unsampled || 0) : k === data.class_fallback ?
          (row[k] || 0) + (row.unsampled || 0) : row[k] || 0;
        if (k === "cov") {
          v = row.cov !== undefined ? row.cov : (row.on + (row.runnable || 0) + blocked + (row.unsampled || 0) + (row.stopped || 0)) / (r[1] - r[0]);
          td.textContent = Math.round(100 * v) + "%";
        } else td.textContent = v ? fmt(v) : "\u00b7";
      });
    });
  }

  /* a group's row of the range: its members' sums, and the lowest of their coverages */
  function groupRow(t, tids, r) {
    var sum = { on: 0 }, cov = Infinity;
    tids.forEach(function (tid) {
      var x = t[tid];
      if (!x) return;
      for (var k in x) sum[k] = (sum[k] || 0) + x[k];
      var b = 0;
      TABLE_BLOCKED.forEach(function (c) { b += x[c] || 0; });
      cov = Math.min(cov, (x.on + (x.runnable || 0) + b + (x.unsampled || 0) + (x.stopped || 0)) / (r[1] - r[0]));
    });
    if (cov !== Infinity) sum.cov = cov;
    return sum;
  }

  function groupName(name) { return name.replace(/[0-9]+/g, "*"); }
  function rootKey(mode) {
    if (mode === "merged") return function () { return -1; };
    if (mode === "group") {
      var counts = new Map();
      var key = function (t) { return GROUPS[t.tid] || groupName(t.name); };
      threadOf.forEach(function (t) { var k = key(t); counts.set(k, (counts.get(k) || 0) + 1); });
      return function (node) {
        var t = threadOf.get(node);
        if (!t) return base.nameId[node];
        var k = key(t), n = counts.get(k);
        return WF.intern(base, n > 1 ? k + " [" + n + " threads]" : base.names[base.nameId[node]]);
      };
    }
    return function (node) { return base.nameId[node]; };
  }

  function rebuild() {
    vt = WF.regroup(base, rootKey(state.threads));
    kids = WF.children(vt);
    graphs.main.mask = MASKS[state.view] || MASKS.both;
    graphs.main.opts.color = colorFor(graphs.main.mask);
    for (var k in graphs) {
      var g = graphs[k];
      g.opts.rootName = k === "main" ? "all threads" : k === "on" ? "on-CPU" : "off-CPU";
      g.setData(vt, kids, WF.values(vt, g.mask));
    }
    $("tot-on").textContent = fmt(graphs.on.total());
    $("tot-off").textContent = fmt(graphs.off.total());
    applyZoom();
    runSearch();
  }

  function applyZoom() {
    for (var k in graphs) {
      var g = graphs[k];
      g.zoomNode = state.z.length ? WF.findPath(vt, kids, g.value, state.z) : 0;
      g.selected = state.sel.length ? WF.findPath(vt, kids, g.value, state.sel) : -1;
      if (g.selected === 0 && state.sel.length) g.selected = -1;
      g.render();
    }
  }

  function showDetails(g, node) {
    var pane = $("wf-details");
    pane.hidden = false;
    $("det-name").textContent = node === 0 ? "all" : vt.names[vt.nameId[node]];
    var v = g.value[node];
    $("det-time").textContent = fmt(v) + " (" + pct(v, g.value[0]) + " of the graph)";
    var list = $("det-classes");
    list.textContent = "";
    breakdown(node, MASKS.both).forEach(function (s) { list.appendChild(WF.el("li", "", s)); });
    var path = [], p = node;
    while (p > 0) { path.push(vt.names[vt.nameId[p]]); p = vt.parent[p]; }
    var depth = path.length;
    var shown = path.slice(0, 24).map(function (s) { return WF.cap(s, 160); });
    if (depth > 24) shown.push("\u2026 " + (depth - 24) + " more frames to the root");
    $("det-path").textContent = shown.join("\n");
    $("det-depth").textContent = "depth " + depth;
  }

  /* ---- search ---- */
  function runSearch() {
    var out = $("search-out"), re = null;
    $("search").value = state.q;
    if (state.q) {
      try { re = new RegExp(state.q); } catch (e) { out.textContent = "invalid regular expression"; }
    }
    var res = {}, shared = re ? WF.matchNodes(vt, re) : null;
    for (var k in graphs) res[k] = graphs[k].search(re, shared);
    if (blame) blame.search(re, re ? WF.matchNodes(blame.tree, re) : null);
    if (!re) { if (!state.q) out.textContent = ""; return; }
    var m = res.main;
    out.textContent = "Matched: " + pct(m.all, m.total) + " (" + fmt(m.all) + ")" +
      (graphs.main.zoomNode > 0 ? ", " + pct(m.zoomed, m.zoomTotal) + " of the zoomed frame" : "") +
      " \u00b7 on-CPU " + pct(res.on.all, res.on.total) + " \u00b7 off-CPU " + pct(res.off.all, res.off.total);
  }

  /* ---- state in the URL ---- */
  function saveHash() {
    var parts = ["view=" + state.view, "threads=" + state.threads];
    if (state.q) parts.push("q=" + encodeURIComponent(state.q));
    if (state.z.length) parts.push("z=" + state.z.join("."));
    if (state.sel.length) parts.push("sel=" + state.sel.join("."));
    if (state.kernel) parts.push("kernel=1");
    if (state.range) parts.push("range=" + (state.range[0] / 1e9).toFixed(6) + "-" + (state.range[1] / 1e9).toFixed(6));
    history.replaceState(null, "", "#" + parts.join("&"));
  }
  function loadHash() {
    var h = location.hash.replace(/^#/, "");
    h.split("&").forEach(function (kv) {
      var i = kv.indexOf("="), k = kv.slice(0, i), v = kv.slice(i + 1);
      if (i < 0) return;
      if (k === "view" && MASKS[v]) state.view = v;
      else if (k === "threads" && /^(per|merged|group)$/.test(v)) state.threads = v;
      else if (k === "q") { try { state.q = decodeURIComponent(v); } catch (e) { state.q = ""; } }
      else if (k === "kernel") state.kernel = v === "1";
      else if (k === "range") {
        var m = /^(\d+(?:\.\d+)?)-(\d+(?:\.\d+)?)$/.exec(v);
        state.range = m && +m[2] > +m[1] ? [Math.round(m[1] * 1e9), Math.round(m[2] * 1e9)] : null;
      }
      else if (k === "z" || k === "sel") {
        // name ids; ids of thread groups are made on the fly (in a stable order), so an id
        // is only checked for being a number: one that names nothing leads nowhere
        state[k] = v ? v.split(".").map(Number).filter(function (x) {
          return Number.isInteger(x) && x >= 0;
        }) : [];
      }
    });
  }
  function syncControls() {
    document.querySelectorAll("input[name=view]").forEach(function (r) { r.checked = r.value === state.view; });
    document.querySelectorAll("input[name=threads]").forEach(function (r) { r.checked = r.value === state.threads; });
    if ($("threads-each")) $("threads-each").checked = state.threads === "per";
    $("kernel").checked = state.kernel;
  }

  /* ---- controls ---- */
  // a finding's "show": the view it names (search, on- or off-CPU, threads grouped)
  document.querySelectorAll("button.show[data-view]").forEach(function (b) {
    b.addEventListener("click", function () {
      location.hash = b.getAttribute("data-view");
      var g = $("graphs");
      if (g) g.scrollIntoView();
    });
  });
  function setView(v) { state.view = v; syncControls(); rebuild(); saveHash(); }
  function setThreads(v) { state.threads = v; state.z = []; state.sel = []; syncControls(); rebuild(); saveHash(); }
  function reset() { state.z = []; state.sel = []; $("wf-details").hidden = true; applyZoom(); runSearch(); saveHash(); }
  document.querySelectorAll("input[name=view]").forEach(function (r) {
    r.addEventListener("change", function () { setView(r.value); });
  });
  document.querySelectorAll("input[name=threads]").forEach(function (r) {
    r.addEventListener("change", function () { setThreads(r.value); });
  });
  // the per-thread table's "one row per thread": the graphs' threads one root each, or grouped
  if ($("threads-each")) $("threads-each").addEventListener("change", function () {
    setThreads($("threads-each").checked ? "per" : "group");
  });
  $("reset").addEventListener("click", reset);
  $("kernel").addEventListener("change", function () {
    state.kernel = $("kernel").checked; state.z = []; state.sel = []; applyRange(); saveHash();
  });
  var timer = 0;
  $("search").addEventListener("input", function () {
    clearTimeout(timer);
    timer = setTimeout(function () { state.q = $("search").value; runSearch(); saveHash(); }, 120);
  });
  $("search").addEventListener("keydown", function (e) {
    if (e.key === "Enter") { clearTimeout(timer); state.q = $("search").value; runSearch(); saveHash(); }
    if (e.key === "Escape") { $("search").blur(); }
  });
  document.addEventListener("keydown", function (e) {
    var t = e.target;
    if ((t && t.tagName === "INPUT" && t.type !== "radio") || e.ctrlKey || e.metaKey || e.altKey) return;
    var modes = ["per", "merged", "group"];
    if (e.key === "/") { e.preventDefault(); $("search").focus(); }
    else if (e.key === "Escape") { state.q = ""; reset(); }
    else if (e.key === "r") reset();
    else if (e.key === "u" && state.z.length) { state.z = state.z.slice(0, -1); applyZoom(); runSearch(); saveHash(); }
    else if (e.key === "1") setView("both");
    else if (e.key === "2") setView("on");
    else if (e.key === "3") setView("off");
    else if (e.key === "k") { $("kernel").checked = !state.kernel; $("kernel").dispatchEvent(new Event("change")); }
    else if (e.key === "t") setThreads(modes[(modes.indexOf(state.threads) + 1) % 3]);
  });
  var resizeTimer = 0;
  window.addEventListener("resize", function () {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(function () { for (var k in graphs) graphs[k].render(); }, 100);
  });
  window.addEventListener("hashchange", function () { state.range = null; state.kernel = false; loadHash(); syncControls(); applyRange(); });

  loadHash();
  syncControls();
  if (timeline) timeline.setOrder(function (r) { return groupName(r.name) + "\u0000" + r.name; });
  applyRange();
  if (window.performance && performance.mark) performance.mark("wf-drawn");
  if (state.sel.length) showDetails(graphs.main, graphs.main.selected > 0 ? graphs.main.selected : 0);
  window.wallflame = { graphs: graphs, blame: blame, state: state, timeline: timeline, search: function (q) {
    state.q = q; runSearch(); saveHash(); return $("search-out").textContent;
  }, zoomPath: function (names) {
    var node = 0;
    for (var i = 0; i < names.length; i++) {
      var found = -1;
      for (var j = kids.start[node]; j < kids.start[node + 1]; j++) {
        if (vt.names[vt.nameId[kids.list[j]]] === names[i]) { found = kids.list[j]; break; }
      }
      if (found < 0) break;
      node = found;
    }
    onClick(graphs.main, node);
    return node;
  } };
})();
