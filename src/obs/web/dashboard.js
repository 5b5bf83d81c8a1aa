/* src/obs/web/dashboard.js: the live dashboard (index.html), drawn with
 * uPlot (vendor/uplot, pinned; see its VERSION). Every second it polls
 * /api/training/status, /api/training/stats and /api/training/events and
 * pulls new history rows from /api/metrics/export?offset=N. Each chart
 * element carries data-points="<rows drawn>" and <body data-ready="1"> is
 * set after the first successful refresh, for headless-browser tests.
 * Zoom: drag across a chart (double-click resets); hover shows values. */
"use strict";

var D = {step: [], loss: [], scale: [], over: [], gnorm: [], zero: [], near: [], ms: [],
         lr: [], prec: []};
var VAL = {step: [], loss: []};
var marks = []; /* {step, kind: "rollback"|"fallback", text} from the events */
var nextOffset = 0, busy = false, samplesPerStep = 0, charts = {};

function $(id) { return document.getElementById(id); }

function fmt(v, d) {
  if (v === null || v === undefined || !isFinite(v)) return "-";
  var a = Math.abs(v);
  if (a !== 0 && (a < 1e-3 || a >= 1e6)) return v.toExponential(d === undefined ? 3 : d);
  return (+v.toPrecision(d === undefined ? 5 : d)).toString();
}

/* A loss scale as it is: an exact integer, with its power of two when it
 * is one ("524288 (2^19)"); fmt() would round it to 5 digits (524290). */
function fmtScale(v) {
  if (v === null || v === undefined || !isFinite(v) || v <= 0) return fmt(v);
  var k = Math.log2(v);
  if (Number.isInteger(k)) return (k >= -20 && k <= 53 ? v.toString() : v.toExponential(3)) +
                                  " (2^" + k + ")";
  return Number.isInteger(v) && v < 1e15 ? v.toString() : fmt(v, 6);
}

function getJSON(url) {
  return fetch(url, {cache: "no-store"}).then(function (r) {
    if (!r.ok) throw new Error(url + ": HTTP " + r.status);
    return r.json();
  });
}

function esc(s) {
  return String(s).replace(/[&<>"]/g, function (c) {
    return {"&": "&amp;", "<": "&lt;", ">": "&gt;", "\"": "&quot;"}[c];
  });
}

/* ---- axes ------------------------------------------------------------- */

function niceSplits(min, max, n) {
  var span = max - min;
  if (!(span > 0)) return [min];
  var step = Math.pow(10, Math.floor(Math.log10(span / n)));
  var e = span / n / step;
  if (e >= 7.5) step *= 10; else if (e >= 3.5) step *= 5; else if (e >= 1.5) step *= 2;
  var out = [];
  for (var v = Math.ceil(min / step) * step; v <= max + step * 1e-9; v += step)
    out.push(+v.toPrecision(12));
  return out;
}

/* Log-10 ticks that always carry numbers: 1-2-5 (or 1..9) per decade when
 * the data spans few decades, every k-th decade when it spans many, and
 * plain linear ticks inside a single narrow band. */
function log10Splits(u, ai, min, max) {
  if (!(min > 0) || !(max > min)) return [];
  var lo = Math.floor(Math.log10(min)), hi = Math.ceil(Math.log10(max)), dec = hi - lo;
  var mult = dec <= 1 ? [1, 2, 3, 4, 5, 6, 7, 8, 9] : dec <= 3 ? [1, 2, 5] : [1];
  var every = dec <= 6 ? 1 : Math.ceil(dec / 6), out = [];
  for (var e = lo; e <= hi; e += every)
    mult.forEach(function (m) {
      var v = +(m * Math.pow(10, e)).toPrecision(6);
      if (v >= min * 0.999999 && v <= max * 1.000001) out.push(v);
    });
  return out.length >= 2 ? out : niceSplits(min, max, 4);
}

function log2Splits(u, ai, min, max) {
  if (!(min > 0) || !(max > min)) return [];
  var lo = Math.ceil(Math.log2(min)), hi = Math.floor(Math.log2(max));
  var every = Math.max(1, Math.ceil((hi - lo + 1) / 7)), out = [];
  for (var e = lo; e <= hi; e += every) out.push(Math.pow(2, e));
  return out.length ? out : [min, max];
}

function pow2Label(v) {
  var e = Math.log2(v);
  return Math.abs(e - Math.round(e)) < 1e-9 && Math.abs(e) > 10 ? "2^" + Math.round(e) : tickFmt(v);
}

/* Log scales pad the data range a little instead of snapping it to whole
 * decades (which squeezes a loss between 0.3 and 0.5 into a flat line). */
function logRange(u, min, max) {
  if (!(min > 0)) min = max > 0 ? max / 10 : 1;
  if (!(max > 0)) max = 10;
  if (max === min) return [min / 1.5, max * 1.5];
  var pad = Math.pow(max / min, 0.04);
  return [min / pad, max * pad];
}

function linRange(u, min, max) {
  if (min === null || max === null) return [0, 1];
  if (max === min) return [min - 1, max + 1];
  var pad = (max - min) * 0.05;
  return [min >= 0 && min - pad < 0 ? 0 : min - pad, max + pad];
}

/* Short tick labels: 2.5e-4, 0.03, 1200, 1.2e+6; digits enough to tell
 * neighbouring ticks apart (prec: significant digits, 3 at least). */
function tickFmt(v, prec) {
  if (v === null || !isFinite(v)) return "";
  if (v === 0) return "0";
  var a = Math.abs(v), p = prec || 3;
  if (a < 1e-3 || a >= 1e6) return Number(v.toPrecision(p)).toExponential();
  return String(+v.toPrecision(Math.max(p, 4)));
}

function tickDigits(splits) {
  if (splits.length < 2) return 3;
  var step = Math.abs(splits[1] - splits[0]), big = 0;
  splits.forEach(function (v) { big = Math.max(big, Math.abs(v)); });
  if (!(step > 0) || !(big > 0)) return 3;
  return Math.min(10, Math.max(3, Math.ceil(Math.log10(big / step)) + 1));
}

function yAxis(label, kind) {
  var a = {label: label, labelSize: 18, size: 72, grid: {stroke: "#eceef2"}};
  if (kind === "log10") a.splits = log10Splits;
  if (kind === "log2") a.splits = log2Splits;
  /* uPlot hides log ticks that are not powers of the base; ours all stay */
  if (kind) a.filter = function (u, splits) { return splits; };
  a.values = function (u, splits) {
    var d = kind ? 3 : tickDigits(splits);
    return splits.map(function (v) { return kind === "log2" ? pow2Label(v) : tickFmt(v, d); });
  };
  return a;
}

/* ---- rollback / fallback marks (vertical lines on the loss chart) ------ */

function drawMarks(u) {
  if (!marks.length) return;
  var c = u.ctx, top = u.bbox.top, h = u.bbox.height;
  c.save();
  c.font = (10 * devicePixelRatio) + "px sans-serif";
  marks.forEach(function (m, i) {
    var x = u.valToPos(m.step, "x", true);
    if (x < u.bbox.left || x > u.bbox.left + u.bbox.width) return;
    c.strokeStyle = m.kind === "rollback" ? "#d7263d" : "#bf8700";
    c.setLineDash(m.kind === "rollback" ? [] : [5 * devicePixelRatio, 3 * devicePixelRatio]);
    c.lineWidth = 1.5 * devicePixelRatio;
    c.beginPath(); c.moveTo(x, top); c.lineTo(x, top + h); c.stroke();
    c.fillStyle = c.strokeStyle;
    /* labels of marks at the same step stack instead of overprinting */
    c.fillText(m.kind, x + 3 * devicePixelRatio, top + (12 + 12 * (i % 4)) * devicePixelRatio);
  });
  c.restore();
}

/* ---- charts ----------------------------------------------------------- */

function makeChart(id, yaxes, series, scales, withMarks) {
  var el = $(id);
  var opts = {
    width: Math.max(300, el.clientWidth), height: 250,
    cursor: {drag: {x: true, y: false}},
    legend: {live: true},
    /* every chart spans the steps of the history, whatever its own data */
    scales: Object.assign({x: {time: false, range: stepRange}}, scales),
    axes: [{label: "step", labelSize: 18, grid: {stroke: "#f0f1f4"}}].concat(yaxes),
    series: [{label: "step"}].concat(series),
    hooks: withMarks ? {draw: [drawMarks]} : {}
  };
  el.innerHTML = "";
  return new uPlot(opts, null, el);
}

function stepRange(u, min, max) {
  var n = D.step.length;
  if (n > 1) return [D.step[0], D.step[n - 1]];
  return [min === null ? 0 : min, max === null || max === min ? (min || 0) + 1 : max];
}

function line(label, color, scale, extra) {
  return Object.assign({label: label, stroke: color, width: 1.25, scale: scale || "y",
                        points: {show: false}, spanGaps: false,
                        value: function (u, v) { return fmt(v); }}, extra || {});
}

function buildCharts() {
  charts.loss = makeChart("chart-loss", [yAxis("loss (log)", "log10")],
                          [line("train loss", "#1f6feb")],
                          {y: {distr: 3, log: 10, range: logRange}}, true);
  charts.val = makeChart("chart-val", [yAxis("validation loss (log)", "log10")],
                         [line("validation loss", "#8250df", "y",
                               {width: 2, points: {show: true, size: 7}, spanGaps: true})],
                         {y: {distr: 3, log: 10, range: logRange}}, true);
  charts.scale = makeChart("chart-scale", [yAxis("loss scale (log2)", "log2")],
                           [line("loss scale", "#8250df"),
                            line("overflow step", "#d7263d", "y",
                                 {width: 0, points: {show: true, size: 7, fill: "#d7263d"}})],
                           {y: {distr: 3, log: 2, range: logRange}}, false);
  charts.lr = makeChart("chart-lr", [yAxis("learning rate")], [line("lr", "#0a7f6f")],
                        {y: {range: linRange}}, false);
  charts.grad = makeChart("chart-grad", [yAxis("global grad norm (log)", "log10")],
                          [line("grad norm", "#1a7f37")],
                          {y: {distr: 3, log: 10, range: logRange}}, true);
  charts.gfrac = makeChart("chart-gfrac", [yAxis("fraction of gradients")],
                           [line("exactly zero", "#bf8700"), line("near overflow", "#cf222e")],
                           {y: {range: linRange}}, false);
  charts.tput = makeChart("chart-tput", [yAxis("samples/s (20-step mean)")],
                          [line("samples/s", "#0969da")], {y: {range: linRange}}, false);
  charts.time = makeChart("chart-time", [yAxis("ms per step")], [line("step time", "#57606a")],
                          {y: {range: linRange}}, false);
}

function positive(a) { return a.map(function (v) { return v > 0 && isFinite(v) ? v : null; }); }

function movingRate(ms, n) {
  var out = new Array(ms.length), sum = 0, k = 0, q = [];
  for (var i = 0; i < ms.length; i++) {
    var v = ms[i] > 0 ? ms[i] : null;
    q.push(v); if (v !== null) { sum += v; k++; }
    if (q.length > n) { var o = q.shift(); if (o !== null) { sum -= o; k--; } }
    out[i] = k > 0 && samplesPerStep > 0 ? samplesPerStep / (sum / k / 1000) : null;
  }
  return out;
}

function setData(name, data) {
  var c = charts[name], el = c.root.parentNode;
  c.setData(data);
  el.setAttribute("data-points", String(data[0].length));
  /* the y tick labels as drawn, for tests (the axes are canvas pixels) */
  var ax = c.axes[1], sc = c.scales.y;
  if (ax && ax.splits && ax.values && sc && sc.min !== null && sc.max !== null) {
    var sp = typeof ax.splits === "function" ? ax.splits(c, 1, sc.min, sc.max) : [];
    el.setAttribute("data-yticks", ax.values(c, sp).join(" "));
  }
}

function render() {
  var xs = D.step;
  var overAt = D.scale.map(function (v, i) { return D.over[i] ? v : null; });
  setData("loss", [xs, positive(D.loss)]);
  setData("val", [VAL.step, VAL.loss]);
  setData("scale", [xs, positive(D.scale), overAt]);
  setData("lr", [xs, D.lr]);
  setData("grad", [xs, positive(D.gnorm)]);
  setData("gfrac", [xs, D.zero, D.near]);
  setData("tput", [xs, movingRate(D.ms, 20)]);
  setData("time", [xs, D.ms]);
}

function resize() {
  Object.keys(charts).forEach(function (k) {
    var el = charts[k].root.parentNode;
    charts[k].setSize({width: Math.max(300, el.clientWidth), height: 250});
  });
}

/* ---- data ------------------------------------------------------------- */

function pullRows() {
  return getJSON("/api/metrics/export?offset=" + nextOffset + "&limit=5000").then(function (r) {
    r.rows.forEach(function (w) {
      D.step.push(w.step); D.loss.push(w.loss); D.scale.push(w.scale); D.over.push(w.overflow);
      D.gnorm.push(w.grad_norm); D.zero.push(w.zero_fraction);
      D.near.push(w.near_overflow_fraction);
      D.ms.push(w.duration_s === null ? null : w.duration_s * 1000);
      D.lr.push(w.lr === undefined ? null : w.lr); D.prec.push(w.precision);
    });
    if (D.step.length > 200000) /* bound the page's memory on very long runs */
      Object.keys(D).forEach(function (k) { D[k].splice(0, D[k].length - 150000); });
    nextOffset = r.next_offset === null ? r.offset + r.rows.length : r.next_offset;
    if (r.next_offset !== null) return pullRows();
  });
}

function eventMarks(events) {
  marks = [];
  events.forEach(function (e) {
    var d = e.detail || {};
    if (e.kind === "fallback" || e.kind === "precision_change")
      marks.push({step: e.step, kind: e.kind === "fallback" ? "fallback" : "switch"});
    if (d.rollback_to !== undefined && d.rollback_to >= 0) marks.push({step: e.step, kind: "rollback"});
  });
}

function guardPanel(g) {
  if (!g) return "<p class=\"muted\">guard off</p>";
  var kv = [["precision", g.initial_precision && g.initial_precision !== g.precision
                          ? g.initial_precision + " \u2192 " + g.precision : g.precision],
            ["events", g.events], ["fallbacks", g.fallbacks], ["rollbacks", g.rollbacks],
            ["rollback store", g.rollback_store],
            ["canary divergence", g.canary_divergence === null ? "-" :
                                  (100 * g.canary_divergence).toFixed(3) + "%"],
            ["stopped", g.stopped ? "yes" : "no"]];
  var h = "<dl>" + kv.map(function (p) {
    return "<dt>" + esc(p[0]) + "</dt><dd>" + esc(p[1] === undefined ? "-" : p[1]) + "</dd>";
  }).join("") + "</dl>";
  h += "<table><thead><tr><th>rule</th><th>fired</th><th>value now</th></tr></thead><tbody>";
  Object.keys(g.rules || {}).forEach(function (name) {
    var r = g.rules[name];
    h += "<tr class=\"" + (r.fired > 0 ? "fired P2" : "") + "\"><td>" + esc(name) +
         "</td><td class=\"num\">" + r.fired + "</td><td class=\"num\">" + fmt(r.value) + "</td></tr>";
  });
  return h + "</tbody></table>";
}

function tick() {
  if (busy) return;
  busy = true;
  Promise.all([getJSON("/api/training/status"), getJSON("/api/training/stats"),
               getJSON("/api/training/events?limit=100"), pullRows()])
  .then(function (a) {
    var st = a[0], ss = a[1], ev = a[2];
    samplesPerStep = st.samples_per_step || samplesPerStep;
    $("run").textContent = st.run_id;
    $("state").textContent = st.state; $("state").className = st.state;
    $("precision").textContent = st.precision || "-";
    $("fp16").textContent = st.fp16_enabled_runtime ? "True" : "False";
    var step = st.step + (st.total_steps ? " / " + st.total_steps : "");
    if (st.training_steps !== undefined && st.training_steps !== st.step)
      step += " (" + st.training_steps + " trained, replays included)";
    $("step").textContent = step;
    $("epoch").textContent = st.epoch === undefined ? "-" : String(st.epoch + 1);
    $("loss").textContent = fmt(st.loss); $("scale").textContent = fmtScale(st.loss_scale);
    $("val").textContent = fmt(ss.validation_loss);
    $("ovr").textContent = ss.overflow_rate === null ? "-" : (100 * ss.overflow_rate).toFixed(2) + "%";
    if (ss.validation_loss !== null && isFinite(ss.validation_loss) &&
        (!VAL.loss.length || VAL.loss[VAL.loss.length - 1] !== ss.validation_loss)) {
      /* the charts' x is the training step (replays included), as the rows' */
      VAL.step.push(st.training_steps !== undefined ? st.training_steps : st.step);
      VAL.loss.push(ss.validation_loss);
    }
    $("guard").innerHTML = guardPanel(ss.guard);
    eventMarks(ev.events);
    $("events").innerHTML = ev.events.slice().reverse().map(function (e) {
      return "<tr class=\"" + esc(e.severity) + "\"><td>" + e.step + "</td><td>" +
             esc((e.timestamp || "").slice(11)) + "</td><td>" + esc(e.kind) + "</td><td>" +
             esc(e.severity) + "</td><td>" + esc(e.message) + "</td></tr>";
    }).join("");
    $("events").setAttribute("data-count", String(ev.events.length));
    render();
    $("err").textContent = "";
    document.body.setAttribute("data-ready", "1");
  }).catch(function (e) { $("err").textContent = String(e); })
  .then(function () { busy = false; });
}

buildCharts();
tick();
setInterval(tick, 1000);
window.addEventListener("resize", resize);
