/* wallflame differential flamegraph: the union tree of two runs drawn with WF.Flame.
 *
 * Each node carries both sides' inclusive on-CPU and off-CPU weight.  Shaped like AFTER the
 * widths are AFTER's (what grew is red); shaped like BEFORE they are BEFORE's (what vanished
 * is visible, blue).  Colour is the normalised delta (self or total); a delta within k
 * standard errors of sampling is drawn neutral.  Names reach the DOM via textContent only.
 */
"use strict";

(function () {
  var data = JSON.parse(document.getElementById("wf-diff-data").textContent);
  var S = data.stacks, sides = data.sides, K = data.k;
  var tree = buildTree(S), n = tree.n, V = tree.v, selfV = tree.self, i, s;
  var kids = WF.children(tree);

  /* One tree from the union stacks: a node per distinct path prefix (parents before
   * children), the stack's four weights added as self at its last node, then summed up. */
  function buildTree(S) {
    var nNames = S.names.length, parent = [-1], nameId = [0], index = new Map();
    var leaf = new Int32Array(S.len.length), pos = 0;
    for (var k = 0; k < S.len.length; k++) {
      var node = 0;
      for (var j = 0; j < S.len[k]; j++) {
        var id = S.frames[pos++], key = node * nNames + id, m = index.get(key);
        if (m === undefined) {
          m = parent.length;
          index.set(key, m);
          parent.push(node);
          nameId.push(id);
        }
        node = m;
      }
      leaf[k] = node;
    }
    var cnt = parent.length, self = new Float64Array(cnt * 4), v;
    for (k = 0; k < leaf.length; k++) {
      for (var c = 0; c < 4; c++) self[leaf[k] * 4 + c] += S.v[k * 4 + c];
    }
    v = Float64Array.from(self);
    for (k = cnt - 1; k > 0; k--) {
      for (c = 0; c < 4; c++) v[parent[k] * 4 + c] += v[k * 4 + c];
    }
    return { n: cnt, names: S.names, nameId: Int32Array.from(nameId),
             parent: Int32Array.from(parent), v: v, self: self };
  }
  var $ = function (id) { return document.getElementById(id); };
  var st = { view: "all", shape: "after", delta: "total", norm: data.mode };
  var ns = sides[0].unit === "ns";
  if (!(sides[0].window_s > 0 && sides[1].window_s > 0)) {
    $("c-norm").querySelector("option[value=rate]").disabled = true;
  }
  $("c-norm").value = st.norm;

  function pick(view) { return view === "on" ? [1, 0] : view === "off" ? [0, 1] : [1, 1]; }
  function total(side, view) {
    var m = pick(view);
    return side.total_on * m[0] + side.total_off * m[1];
  }
  function scale(side, view) {
    if (st.norm === "rate") return side.window_s * (ns ? 1e9 : 1);
    return total(side, view) || 1;
  }
  /* Variance of a normalised value: binomial for a share, Poisson-like for a rate. */
  function variance(side, on, off, view) {
    var m = pick(view), parts = [[on * m[0], side.total_on, side.samples_on],
                                 [off * m[1], side.total_off, side.samples_off]];
    var v = 0;
    for (var j = 0; j < 2; j++) {
      var x = parts[j][0], tot = parts[j][1], cnt = parts[j][2];
      if (tot <= 0 || x <= 0) continue;
      if (cnt <= 0) return Infinity;
      v += x * (st.norm === "share" ? Math.max(0, tot - x) : tot) / cnt;
    }
    var sc = scale(side, view);
    return v / (sc * sc);
  }

  var A, B, D, SE, width, maxAbs;
  function compute() {
    var src = st.delta === "self" ? selfV : V, m = pick(st.view);
    var sa = scale(sides[0], st.view), sb = scale(sides[1], st.view);
    A = new Float64Array(n); B = new Float64Array(n); D = new Float64Array(n);
    SE = new Float64Array(n); width = new Float64Array(n); maxAbs = 0;
    var w0 = st.shape === "after" ? 2 : 0;
    for (var j = 0; j < n; j++) {
      var o = j * 4, ra = src[o] * m[0] + src[o + 1] * m[1];
      var rb = src[o + 2] * m[0] + src[o + 3] * m[1];
      A[j] = ra / sa; B[j] = rb / sb; D[j] = B[j] - A[j];
      SE[j] = Math.sqrt(variance(sides[0], src[o] * m[0], src[o + 1] * m[1], st.view) +
                        variance(sides[1], src[o + 2] * m[0], src[o + 3] * m[1], st.view));
      width[j] = V[o + w0] * m[0] + V[o + w0 + 1] * m[1];
      if (j > 0 && Math.abs(D[j]) > K * SE[j] && Math.abs(D[j]) > maxAbs) maxAbs = Math.abs(D[j]);
    }
  }

  function color(node) {
    var d = D[node];
    if (!(Math.abs(d) > K * SE[node]) || d === 0 || maxAbs === 0) return "#e4e0d6";
    /* strongest change: rgb(255,90,90) / rgb(110,110,255), still readable under dark labels */
    var t = Math.sqrt(Math.min(1, Math.abs(d) / maxAbs));
    var c = Math.round((d > 0 ? 90 : 110) + 130 * (1 - t));
    return d > 0 ? "rgb(255," + c + "," + c + ")" : "rgb(" + c + "," + c + ",255)";
  }

  function fmt(x) {
    if (st.norm === "share") return (100 * x).toFixed(2) + "%";
    return ns ? x.toFixed(4) + " s/s" : x.toFixed(1) + "/s";
  }
  function fmtD(x) {
    if (st.norm === "share") return (x >= 0 ? "+" : "") + (100 * x).toFixed(2) + " pp";
    return (x >= 0 ? "+" : "") + (ns ? x.toFixed(4) + " s/s" : x.toFixed(1) + "/s");
  }
  function rel(a, b) {
    if (a === 0) return b > 0 ? "new" : "";
    if (b === 0) return "gone";
    return ((b - a) / a * 100).toFixed(0) + "%";
  }

  function tooltip(fl, node) {
    var name = node === 0 ? "all" : tree.names[tree.nameId[node]];
    var what = st.delta === "self" ? "self" : "total";
    var sig = Math.abs(D[node]) > K * SE[node] && D[node] !== 0;
    return [name,
      what + ": before " + fmt(A[node]) + ", after " + fmt(B[node]) + ", delta " +
        fmtD(D[node]) + " " + rel(A[node], B[node]),
      "noise floor: \u00b1" + (isFinite(SE[node]) ? fmtD(K * SE[node]).slice(1) :
        "unknown (sample count not recorded)") + (sig ? "" : " \u2014 within noise")];
  }

  var flame = new WF.Flame($("flame"), {
    color: color, tooltip: tooltip, tooltipEl: $("tip"), rootName: "all",
    emptyText: "nothing on this side in this view",
    onClick: function (fl, node) { fl.zoomTo(node); }
  });

  function normText() {
    return st.norm === "rate" ?
      "normalisation: rate \u2014 thread time per second of each side's window" :
      "normalisation: share \u2014 each side as a share of its own total";
  }

  function redraw() {
    compute();
    flame.setData(tree, kids, width);
    flame.render();
    $("graph-norm").textContent = "graph " + normText() + "; colour: " + st.delta +
      " delta, neutral within " + K + " standard errors";
    var msg = "drawn: " + n + " frames";
    if (S.elided) msg += "; the " + S.elided + " lightest stacks left out (size budget)";
    $("graph-status").textContent = msg + ". Click a frame to zoom.";
    search();
  }

  function search() {
    var q = $("c-search").value, re = null;
    if (q) { try { re = new RegExp(q); } catch (e) { re = null; } }
    var r = flame.search(re);
    if (r && r.total > 0) {
      $("graph-status").textContent = "Matched: " + (100 * r.all / r.total).toFixed(1) +
        "% of the drawn side";
    }
  }

  ["c-view", "c-shape", "c-delta", "c-norm"].forEach(function (id) {
    $(id).addEventListener("change", function (e) {
      st[id.slice(2)] = e.target.value;
      redraw();
    });
  });
  $("c-search").addEventListener("input", search);
  $("c-reset").addEventListener("click", function () { flame.zoomTo(0); });
  window.addEventListener("resize", function () { flame.render(); });
  $("controls").hidden = false;
  redraw();
  /* for tests and for the curious: the tree, the renderer, the state and the colour rule */
  window.wallflameDiff = { tree: tree, flame: flame, state: st, color: color,
                           width: function (node) { return width[node]; }, redraw: redraw };
})();
