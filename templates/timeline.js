/* wallflame timeline: one row per thread over the window, coloured by state and wait class.
 *
 * Drawn into a canvas, binned per pixel column: each column takes the colour of the state
 * that filled most of its time, so 64 threads over 60 s cost one pass over the events in
 * view and one rectangle per run of equal columns.  Pointer and selection marks are drawn on
 * a second canvas over it, so hovering never redraws the rows.  Wheel zooms around the
 * pointer, shift+wheel or shift+drag pans, a drag selects a range (handed to the page, which
 * restricts its graphs to it), a click clears it, a double click shows the whole window.
 * Names reach the page only through textContent and canvas text, never as markup.
 */
"use strict";

WF.Timeline = (function () {
  var ROW = 12, GAP = 2, AXIS = 18, LABEL = 150;

  function decode(th) {
    var s = th.s, p = th.p, i, t;
    var out = { tid: th.tid, name: th.name, node: th.node,
      sT: new Float64Array(s[0].length), sW: Float64Array.from(s[1]), sN: Int32Array.from(s[2]),
      pS: new Float64Array(p[0].length), pD: Float64Array.from(p[1]), pK: Int8Array.from(p[2]),
      pN: Int32Array.from(p[3]), pL: Int32Array.from(p[4]), first: Infinity, last: -Infinity };
    for (i = 0, t = 0; i < s[0].length; i++) { t += s[0][i]; out.sT[i] = t; }
    for (i = 0, t = 0; i < p[0].length; i++) { t += p[0][i]; out.pS[i] = t; }
    /* a blocked span's period (1 unless listed: 0 for a wait a snapshot's stop showed), its
       whole duration (the span's own unless the report's range cut it), and the thread's
       blocked time of the whole window by node and class (see blocked) */
    out.pP = new Float64Array(p[0].length).fill(1);
    (th.pp || []).forEach(function (e) { out.pP[e[0]] = e[1]; });
    out.pW = Float64Array.from(p[1]);
    (th.pw || []).forEach(function (e) { out.pW[e[0]] = e[1]; });
    out.wb = th.wb || [];
    if (out.pS.length) {
      out.first = out.pS[0];
      for (i = 0; i < out.pS.length; i++) out.last = Math.max(out.last, out.pS[i] + out.pD[i]);
    }
    if (out.sT.length) {
      out.first = Math.min(out.first, out.sT[0]);
      out.last = Math.max(out.last, out.sT[out.sT.length - 1]);
    }
    return out;
  }

  /* the first index whose value is > x, in a sorted array */
  function upper(a, x) {
    var lo = 0, hi = a.length;
    while (lo < hi) { var m = (lo + hi) >> 1; if (a[m] <= x) lo = m + 1; else hi = m; }
    return lo;
  }

  function Timeline(host, tl, o) {
    this.tl = tl;
    this.o = o;
    this.kinds = tl.kinds;
    this.nk = tl.kinds.length + 1;   // the last: on-CPU
    this.on = tl.kinds.length;
    this.rows = tl.threads.map(decode);
    this.unsampled = tl.kinds.indexOf("unsampled");
    this.order = this.rows.map(function (_, i) { return i; });
    this.v0 = 0;
    this.v1 = Math.max(tl.length, 1);
    this.range = null;
    this.drag = null;
    this.hover = null;
    this.colours = this.kinds.map(function (k) { return o.colour(k); });
    this.colours.push(o.colour("on"));
    var wrap = WF.el("div", "tl-wrap");
    this.base = WF.el("canvas", "tl-base");
    this.top = WF.el("canvas", "tl-top");
    wrap.appendChild(this.base);
    wrap.appendChild(this.top);
    host.appendChild(wrap);
    this.wrap = wrap;
    this.tip = o.tipEl;
    this.frameTimes = [];
    this.bind();
  }

  Timeline.prototype.setOrder = function (keyOf) {
    var rows = this.rows;
    this.order = rows.map(function (_, i) { return i; }).sort(function (a, b) {
      var x = keyOf(rows[a]), y = keyOf(rows[b]);
      return x < y ? -1 : x > y ? 1 : rows[a].tid - rows[b].tid;
    });
    this.render();
  };

  Timeline.prototype.size = function () {
    var w = Math.max(200, this.wrap.clientWidth || 800), h = AXIS + this.rows.length * (ROW + GAP);
    var dpr = window.devicePixelRatio || 1;
    [this.base, this.top].forEach(function (c) {
      if (c.width !== Math.round(w * dpr) || c.height !== Math.round(h * dpr)) {
        c.width = Math.round(w * dpr);
        c.height = Math.round(h * dpr);
        c.style.width = w + "px";
        c.style.height = h + "px";
      }
    });
    this.w = w;
    this.h = h;
    this.dpr = dpr;
    this.cols = Math.max(1, Math.floor(w - LABEL));
  };

  Timeline.prototype.x = function (t) { return LABEL + (t - this.v0) / (this.v1 - this.v0) * this.cols; };
  Timeline.prototype.t = function (x) { return this.v0 + (x - LABEL) / this.cols * (this.v1 - this.v0); };

  /* time per state in each pixel column of one row */
  Timeline.prototype.bin = function (r, acc) {
    var v0 = this.v0, v1 = this.v1, cols = this.cols, dt = (v1 - v0) / cols, nk = this.nk;
    acc.fill(0);
    function add(a, b, k) {
      if (a < v0) a = v0;
      if (b > v1) b = v1;
      if (b <= a) return;
      var c0 = Math.floor((a - v0) / dt), c1 = Math.min(cols - 1, Math.floor((b - v0) / dt));
      if (c0 === c1) { acc[c0 * nk + k] += b - a; return; }
      acc[c0 * nk + k] += v0 + (c0 + 1) * dt - a;
      for (var c = c0 + 1; c < c1; c++) acc[c * nk + k] += dt;
      acc[c1 * nk + k] += b - (v0 + c1 * dt);
    }
    var i = Math.max(0, upper(r.pS, v0) - 1), n = r.pS.length;
    for (; i < n && r.pS[i] < v1; i++) add(r.pS[i], r.pS[i] + r.pD[i], r.pK[i]);
    if (this.tl.sched) {
      /* between a thread's spans it was running: the rest of its lifetime in each column */
      var on = this.on, a = Math.max(v0, r.first), b = Math.min(v1, r.last);
      if (b > a) {
        var c0 = Math.floor((a - v0) / dt), c1 = Math.min(cols - 1, Math.floor((b - v0) / dt));
        for (var c = c0; c <= c1; c++) {
          var span = Math.min(b, v0 + (c + 1) * dt) - Math.max(a, v0 + c * dt), used = 0;
          for (var k = 0; k < on; k++) used += acc[c * nk + k];
          if (span > used) acc[c * nk + on] += span - used;
        }
      }
    } else {
      for (i = upper(r.sT, v0 - 1e-9); i < r.sT.length && r.sT[i] < v1; i++) {
        var col = Math.floor((r.sT[i] - v0) / dt);
        acc[col * nk + this.on] += r.sW[i];
      }
    }
  };

  Timeline.prototype.render = function () {
    var t0 = performance.now();
    this.size();
    var g = this.base.getContext("2d"), nk = this.nk, cols = this.cols;
    g.setTransform(this.dpr, 0, 0, this.dpr, 0, 0);
    g.clearRect(0, 0, this.w, this.h);
    g.font = "11px sans-serif";
    g.textBaseline = "middle";
    this.axis(g);
    var acc = new Float64Array(cols * nk);
    for (var j = 0; j < this.order.length; j++) {
      var r = this.rows[this.order[j]], y = AXIS + j * (ROW + GAP);
      g.fillStyle = "#333";
      g.fillText(WF.cap(r.name + " (" + r.tid + ")", 24), 2, y + ROW / 2, LABEL - 6);
      this.bin(r, acc);
      var runStart = -1, runColour = null;
      for (var c = 0; c <= cols; c++) {
        var colour = null;
        if (c < cols) {
          var best = -1, bv = 0, o = c * nk;
          for (var k = 0; k < nk; k++) if (acc[o + k] > bv) { bv = acc[o + k]; best = k; }
          colour = best < 0 ? null : this.colours[best];
        }
        if (colour !== runColour) {
          if (runColour !== null) { g.fillStyle = runColour; g.fillRect(LABEL + runStart, y, c - runStart, ROW); }
          runStart = c;
          runColour = colour;
        }
      }
    }
    this.overlay();
    this.frameTimes.push(performance.now() - t0);
    if (this.frameTimes.length > 600) this.frameTimes.shift();
  };

  Timeline.prototype.axis = function (g) {
    var span = (this.v1 - this.v0) / 1e9, step = Math.pow(10, Math.floor(Math.log10(span / 6)));
    if (span / step > 12) step *= 5; else if (span / step > 6) step *= 2;
    var off = this.tl.offset / 1e9;
    g.fillStyle = "#666";
    for (var s = Math.ceil((this.v0 / 1e9 + off) / step) * step; s <= this.v1 / 1e9 + off; s += step) {
      var x = this.x((s - off) * 1e9);
      g.fillRect(x, AXIS - 5, 1, 5);
      g.fillText((+s.toFixed(6)) + " s", x + 2, 7);
    }
  };

  Timeline.prototype.overlay = function () {
    var g = this.top.getContext("2d");
    g.setTransform(this.dpr, 0, 0, this.dpr, 0, 0);
    g.clearRect(0, 0, this.w, this.h);
    var sel = this.drag && this.drag.mode === "select" ? [this.drag.a, this.drag.b] : this.range;
    if (sel) {
      var a = Math.max(LABEL, this.x(Math.min(sel[0], sel[1]))), b = Math.min(this.w, this.x(Math.max(sel[0], sel[1])));
      g.fillStyle = "rgba(40,90,200,0.18)";
      g.fillRect(a, AXIS, Math.max(1, b - a), this.h - AXIS);
      g.fillStyle = "rgba(40,90,200,0.8)";
      g.fillRect(a, AXIS, 1, this.h - AXIS);
      g.fillRect(b, AXIS, 1, this.h - AXIS);
    }
    var hv = this.hover;
    if (hv) {
      g.fillStyle = "rgba(0,0,0,0.6)";
      g.fillRect(hv.x, AXIS, 1, this.h - AXIS);
      var self = this;
      (hv.holders || []).forEach(function (tid) {
        var j = self.rowOf(tid);
        if (j < 0) return;
        var y = AXIS + j * (ROW + GAP);
        g.strokeStyle = "#d4002a";
        g.lineWidth = 2;
        g.strokeRect(LABEL, y - 1, self.cols, ROW + 2);
        g.beginPath();
        g.moveTo(hv.x, hv.y);
        g.lineTo(hv.x, y + ROW / 2);
        g.stroke();
      });
    }
  };

  Timeline.prototype.rowOf = function (tid) {
    for (var j = 0; j < this.order.length; j++) if (this.rows[this.order[j]].tid === tid) return j;
    return -1;
  };

  /* what is under the pointer: the state, its span and the stack (leaf first) */
  Timeline.prototype.at = function (x, y) {
    var j = Math.floor((y - AXIS) / (ROW + GAP));
    if (j < 0 || j >= this.order.length || x < LABEL) return null;
    var r = this.rows[this.order[j]], t = this.t(x), dt = (this.v1 - this.v0) / this.cols;
    var i = upper(r.pS, t) - 1, tl = this.tl, out = { row: j, thread: r, t: t, x: x, y: y };
    if (i >= 0 && t < r.pS[i] + r.pD[i]) {
      var k = r.pK[i], ref = r.pL[i];
      out.state = this.kinds[k];
      out.start = r.pS[i];
      out.dur = r.pD[i];
      out.node = r.pN[i];
      out.lock = ref ? tl.locks[ref - 1] : "";
      out.holders = ref ? tl.holders[ref - 1].filter(function (h) { return h !== r.tid; }) : [];
      return out;
    }
    if (t < r.first || t > r.last) return null;
    out.state = "on-CPU";
    var s = upper(r.sT, t), best = -1, bd = Math.max(4 * dt, 5e6);
    [s - 1, s].forEach(function (c) {
      if (c >= 0 && c < r.sT.length && Math.abs(r.sT[c] - t) < bd) { bd = Math.abs(r.sT[c] - t); best = c; }
    });
    if (best >= 0) { out.node = r.sN[best]; out.start = r.sT[best]; out.sample = true; }
    return out;
  };

  Timeline.prototype.describe = function (hit) {
    var o = this.o, lines = [hit.thread.name + " (" + hit.thread.tid + ")",
      "at " + o.seconds(hit.t + this.tl.offset) + ": " + (hit.lock ? hit.state + " " + hit.lock : hit.state)];
    if (hit.dur !== undefined) lines.push("for " + o.fmt(hit.dur) + " from " + o.seconds(hit.start + this.tl.offset));
    else if (hit.sample) lines.push("sample at " + o.seconds(hit.start + this.tl.offset));
    if (hit.holders && hit.holders.length) lines.push("lock held (confirmed) by thread " + hit.holders.join(", "));
    var stack = hit.node !== undefined && hit.node > 0 ? o.stackOf(hit.node) : [];
    if (stack.length) {
      lines.push("");
      stack.slice(0, 16).forEach(function (f) { lines.push(WF.cap(f, 120)); });
      if (stack.length > 16) lines.push("\u2026 " + (stack.length - 16) + " more frames");
    } else if (hit.state !== "on-CPU" || hit.sample) {
      lines.push("(no stack)");
    }
    return lines;
  };

  Timeline.prototype.showTip = function (hit, ev) {
    var tip = this.tip;
    if (!hit) { tip.hidden = true; return; }
    tip.textContent = "";
    this.describe(hit).forEach(function (l, i) { tip.appendChild(WF.el("div", i ? "" : "tt-name", l)); });
    tip.hidden = false;
    var x = ev.clientX + 14, y = ev.clientY + 14, w = tip.offsetWidth, h = tip.offsetHeight;
    if (x + w > window.innerWidth) x = Math.max(0, ev.clientX - w - 14);
    if (y + h > window.innerHeight) y = Math.max(0, ev.clientY - h - 14);
    tip.style.left = x + "px";
    tip.style.top = y + "px";
  };

  Timeline.prototype.setView = function (v0, v1) {
    var len = Math.max(this.tl.length, 1), min = 1e4;
    if (v1 - v0 < min) { var mid = (v0 + v1) / 2; v0 = mid - min / 2; v1 = mid + min / 2; }
    if (v1 - v0 > len) { v0 = 0; v1 = len; }
    if (v0 < 0) { v1 -= v0; v0 = 0; }
    if (v1 > len) { v0 -= v1 - len; v1 = len; }
    this.v0 = Math.max(0, v0);
    this.v1 = v1;
    this.render();
  };
  Timeline.prototype.zoom = function (factor, x) {
    var t = this.t(x === undefined ? LABEL + this.cols / 2 : x);
    this.setView(t - (t - this.v0) * factor, t + (this.v1 - t) * factor);
  };
  Timeline.prototype.pan = function (dx) {
    var d = dx / this.cols * (this.v1 - this.v0);
    this.setView(this.v0 + d, this.v1 + d);
  };
  Timeline.prototype.select = function (a, b, quiet) {
    /* to the microsecond, as the address keeps it */
    this.range = a === null ? null : [Math.max(0, Math.round(Math.min(a, b) / 1e3) * 1e3),
      Math.min(this.tl.length, Math.round(Math.max(a, b) / 1e3) * 1e3)];
    this.overlay();
    if (!quiet && this.o.onRange) this.o.onRange(this.range);
  };

  /* the stratum of a wait lasting d ns: factors of 4, half its bit length (wallflame.strata) */
  function stratum(d) {
    d = Math.floor(d);
    return (d < 4294967296 ? 32 - Math.clz32(d) : 64 - Math.clz32(Math.floor(d / 4294967296))) >> 1;
  }

  /* over keys in proportion to their weights */
  function spread(emit, weights, total) {
    var sum = 0, k;
    for (k in weights) sum += weights[k];
    if (sum > 0) for (k in weights) emit(+k, total * weights[k] / sum);
  }

  /* A thread's blocked time in [a, b), split as report --from/--to splits it
     (wallflame.strata, report.timerange): a span a snapshot's stop showed (a stack, period 0)
     keeps its time; the rest goes, stratum by stratum of the spans' whole durations, over the
     stacks of that stratum's spans with one (a sampled span by period x time, a shown one by
     time, the two estimates weighted by how many spans each holds); a stratum with neither
     goes over the thread's sampled stacks in the range, with none over its blocked stacks of
     the whole window (r.wb), else to the thread's own node as the fallback class.  emit(node x
     nc + class, ns) for each part; byClass: emit(class, ns) instead. */
  Timeline.prototype.blocked = function (r, a, b, nc, emit, byClass) {
    var cls = this.tl.kind_class, U = this.unsampled, i;
    var total = {}, sampled = {}, known = {}, nS = {}, nK = {}, pooled = {}, anyPool = false;
    function add(by, count, s, key, w) {
      var one = by[s] || (by[s] = {});
      one[key] = (one[key] || 0) + w;
      count[s] = (count[s] || 0) + 1;
    }
    for (i = Math.max(0, upper(r.pS, a) - 1); i < r.pS.length && r.pS[i] < b; i++) {
      var k = r.pK[i];
      if (k > U) continue;
      var c = Math.min(b, r.pS[i] + r.pD[i]) - Math.max(a, r.pS[i]);
      if (c <= 0) continue;
      var s = stratum(r.pW[i]);
      total[s] = (total[s] || 0) + c;
      if (k === U || (r.pN[i] < 0 && !byClass)) continue;
      var key = byClass ? cls[k] : r.pN[i] * nc + cls[k], p = r.pP[i];
      if (p) {
        add(sampled, nS, s, key, p * c);
        pooled[key] = (pooled[key] || 0) + p * c;
        anyPool = true;
      } else add(known, nK, s, key, c);
    }
    var leftover = 0;
    Object.keys(total).forEach(function (s) {
      var kn = known[s] || {}, sm = sampled[s] || {}, own = 0, key;
      for (key in kn) { emit(+key, kn[key]); own += kn[key]; }
      var rest = total[s] - own;
      if (rest <= 0) return;
      if (!nS[s] && !nK[s]) { leftover += rest; return; }
      var ws = 0, wk = 0, weights = {};
      for (key in sm) ws += sm[key];
      for (key in kn) wk += kn[key];
      ws = ws || 1; wk = wk || 1;
      for (key in sm) weights[key] = (weights[key] || 0) + (nS[s] || 0) * sm[key] * wk;
      for (key in kn) weights[key] = (weights[key] || 0) + (nK[s] || 0) * kn[key] * ws;
      spread(emit, weights, rest);
    });
    if (!leftover) return;
    if (anyPool) spread(emit, pooled, leftover);
    else if (r.wb.length) {
      var whole = {};
      r.wb.forEach(function (e) {
        var at = byClass ? e[0] % nc : e[0];
        whole[at] = (whole[at] || 0) + e[1];
      });
      spread(emit, whole, leftover);
    } else if (byClass) emit(cls[U], leftover);
    else if (r.node >= 0) emit(r.node * nc + cls[U], leftover);
  };

  /* self time per flame-tree node and class of the events in [a, b) (ns from the start) */
  Timeline.prototype.selfs = function (a, b, n, nc) {
    var self = new Float64Array(n * nc), cls = this.tl.kind_class, U = this.unsampled, tl = this;
    function emit(at, ns) { self[at] += ns; }
    this.rows.forEach(function (r) {
      var i;
      for (i = upper(r.sT, a - 1e-9); i < r.sT.length && r.sT[i] < b; i++) {
        if (r.sN[i] >= 0) self[r.sN[i] * nc] += r.sW[i];
      }
      for (i = Math.max(0, upper(r.pS, a) - 1); i < r.pS.length && r.pS[i] < b; i++) {
        var c = Math.min(b, r.pS[i] + r.pD[i]) - Math.max(a, r.pS[i]), k = r.pK[i];
        if (c <= 0 || r.pN[i] < 0 || k <= U) continue;  // blocked: below
        if (cls[k] >= 0) self[r.pN[i] * nc + cls[k]] += c;
      }
      tl.blocked(r, a, b, nc, emit);
    });
    return self;
  };

  /* each thread's time per state in [a, b): {tid: {on: ns, <kind>: ns, ...}}, its blocked
     time by class as the graphs split it (blocked) */
  Timeline.prototype.totals = function (a, b) {
    var kinds = this.kinds, U = this.unsampled, out = {}, tl = this, cls = this.tl.kind_class;
    var nc = this.tl.classes, kindOf = {};
    for (var k = U; k >= 0; k--) kindOf[cls[k]] = kinds[k];  // a class's kind (not unsampled)
    this.rows.forEach(function (r) {
      var t = { on: 0 }, i;
      kinds.forEach(function (k) { t[k] = 0; });
      for (i = upper(r.sT, a - 1e-9); i < r.sT.length && r.sT[i] < b; i++) t.on += r.sW[i];
      for (i = Math.max(0, upper(r.pS, a) - 1); i < r.pS.length && r.pS[i] < b; i++) {
        var c = Math.min(b, r.pS[i] + r.pD[i]) - Math.max(a, r.pS[i]);
        if (c > 0 && r.pK[i] > U) t[kinds[r.pK[i]]] += c;
      }
      tl.blocked(r, a, b, nc, function (at, ns) { t[kindOf[at]] += ns; }, true);
      out[r.tid] = t;
    });
    return out;
  };

  Timeline.prototype.bind = function () {
    var self = this, top = this.top;
    function pos(ev) { var b = top.getBoundingClientRect(); return [ev.clientX - b.left, ev.clientY - b.top]; }
    top.addEventListener("wheel", function (ev) {
      ev.preventDefault();
      var p = pos(ev);
      if (ev.shiftKey || Math.abs(ev.deltaX) > Math.abs(ev.deltaY)) self.pan((ev.deltaX || ev.deltaY) * 0.5);
      else self.zoom(Math.exp(ev.deltaY * 0.002), p[0]);
    }, { passive: false });
    top.addEventListener("mousedown", function (ev) {
      var p = pos(ev);
      if (p[0] < LABEL) return;
      self.drag = { mode: ev.shiftKey ? "pan" : "select", x: p[0], last: p[0], a: self.t(p[0]), b: self.t(p[0]) };
      ev.preventDefault();
    });
    window.addEventListener("mousemove", function (ev) {
      var d = self.drag, p = pos(ev);
      if (d) {
        if (d.mode === "pan") { self.pan(d.last - p[0]); d.last = p[0]; }
        else { d.b = self.t(Math.max(LABEL, Math.min(self.w, p[0]))); self.overlay(); }
        return;
      }
      if (ev.target !== top) return;
      var hit = self.at(p[0], p[1]);
      self.hover = hit;
      self.overlay();
      self.showTip(hit, ev);
    });
    window.addEventListener("mouseup", function (ev) {
      var d = self.drag;
      if (!d) return;
      self.drag = null;
      if (d.mode === "select") {
        if (Math.abs(pos(ev)[0] - d.x) < 3) self.select(null, null);
        else self.select(d.a, d.b);
      }
    });
    top.addEventListener("mouseleave", function () { self.hover = null; self.overlay(); self.tip.hidden = true; });
    top.addEventListener("dblclick", function () { self.setView(0, self.tl.length); });
  };

  return Timeline;
})();
