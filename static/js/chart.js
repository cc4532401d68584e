// A metric chart on uPlot: several keys against the training step, the downsampled
// series from the API (last value per bucket, with the first key's min/max as a band),
// live points appended as frames arrive, alert steps drawn as dashed lines, and a
// click on the plot reporting the step under the cursor. Series whose scales differ by
// two orders of magnitude or more get a second y axis (issue 22.10b); both axes carry
// a title; a lone point is drawn as a dot; the plot is focusable and the arrow keys
// move a readout along the steps (issue 22.11). A value that is not a number (NaN,
// +-inf) breaks its line and is marked on the plot's edge (chart_nonfinite.js).
// Charts of one page may share a view (chart_view.js: smoothing, cursor, zoom, log).

import uPlot from "../vendor/uplot/uPlot.esm.js";
import { cssVar, fmt } from "./util.js";

import {
  axisTitle, axisWidth, colour, finiteOrNull, fitTitles, logTickLabels, nonFinite, oddName, placeTitleTips, splitScales,
  STEP_INCRS, tickLabels, yRange,
} from "./chart_axes.js";
import { noteOdd, placeOddMarks, roomForMarks } from "./chart_nonfinite.js";
import { ema, pickOnClick, selected, seriesShown } from "./chart_view.js";

/** The step axis's range: one step alone gets a range around it, not a zero width. */
const stepRange = (min, max) => (min === max ? [min - 1, max + 1] : [min, max]);

export class MetricChart {
  /**
   * @param {HTMLElement} plotEl where the plot goes
   * @param {{keys: string[], labels?: string[], onPick?: (step:number)=>void, band?: boolean}} opts
   *   also ``right``: which keys go on the right axis (an array of booleans), or
   *   false for one axis whatever the magnitudes (default: split by magnitude);
   *   ``yTitles``: [left, right] axis titles instead of the keys' names;
   *   ``colours``: per key, its place in the palette (default: the key's position);
   *   ``group``: the page's ChartGroup (shared smoothing, cursor and zoom).
   */
  constructor(plotEl, opts) {
    this.el = plotEl;
    this.xTitle = opts.xTitle || "training step";
    this.yTitle = opts.yTitle || "";
    this.yTitles = opts.yTitles || null;
    this.fixedRight = opts.right;
    this.readout = opts.readout || null;
    if (opts.name) this._focusable(opts.name);
    this.keys = opts.keys;
    this.labels = opts.labels || opts.keys;
    this.colours = opts.colours || null;
    this.onPick = opts.onPick;
    this.band = opts.band !== false;
    this.points = new Map(); // step -> Float64 values per key (null when missing)
    // Per key, the steps whose value is not a number: step -> NaN / ±Infinity. A line
    // cannot go through them: they are marked on the plot's top (NaN, +∞) or bottom
    // (−∞) edge, named in the legend and in a note under the plot.
    this.odd = this.keys.map(() => new Map());
    this.minmax = new Map(); // step -> [min, max] of the first key (downsampled buckets)
    this.alerts = [];
    this.plot = null;
    this.pending = false;
    this.onData = opts.onData || (() => {});
    this.group = opts.group || null;
    this.group?.add(this);
    this.log = false; // asked for a log y scale (chart_view.logToggle)
    this.onLogRoom = null; // told after each render why a log scale cannot be (or null)
    this.rawAt = null; // smoothed: the column of the first key's logged values
    this.hidden = new Set(); // series (1-based) hidden from the legend, kept when the plot is made again
    this.dead = false;
  }

  /** The smoothing weight of the page's view (0: none). */
  get smoothing() {
    return this.group ? this.group.smoothing : 0;
  }

  /** Key ``k``'s colour: its place in ``colours``, else its own, in the palette. */
  colourOf(k) {
    return colour(this.colours ? this.colours[k] : k);
  }

  /** Replace everything with an API response of /metrics (series per key). */
  load(series, bucketWidth = 1) {
    if (this.dead) return;
    this.points.clear();
    this.minmax.clear();
    this.odd.forEach((m) => m.clear());
    this.downsampled = bucketWidth > 1;
    this.keys.forEach((key, k) => {
      const s = series[key];
      if (!s) return;
      for (let i = 0; i < s.step.length; i++) {
        this._set(s.step[i], k, s.last[i]);
        if (k === 0 && this.downsampled && s.min && s.max) this.minmax.set(s.step[i], [finiteOrNull(s.min[i]), finiteOrNull(s.max[i])]);
        // A downsampled bucket's last value may be a number while its min or max is
        // not (a NaN sorts above every number): marked at the step it came from.
        for (const [vals, at] of [[s.min, s.min_step], [s.max, s.max_step]]) {
          const v = vals ? nonFinite(vals[i]) : null;
          if (v !== null) this.odd[k].set(at ? at[i] : s.step[i], v);
        }
      }
    });
    this.schedule();
  }

  /** One step's metrics (a live frame or a backfill). */
  add(step, metrics) {
    let hit = false;
    this.keys.forEach((key, k) => {
      if (key in metrics) {
        this._set(step, k, metrics[key]);
        hit = true;
      }
    });
    if (hit) this.schedule();
    return hit;
  }

  /** Step ``step``'s value of key ``k`` (a number, or the API's "NaN"...): numbers
   *  go to the plot, NaN and ±Infinity to ``odd`` (a gap in the line). */
  _set(step, k, raw) {
    let row = this.points.get(step);
    if (!row) {
      row = new Array(this.keys.length).fill(null);
      this.points.set(step, row);
    }
    row[k] = finiteOrNull(raw);
    const odd = nonFinite(raw);
    if (odd !== null) this.odd[k].set(step, odd);
    else if (row[k] !== null) this.odd[k].delete(step);
  }

  setAlerts(steps) {
    this.alerts = [...new Set(steps)];
    this.plot?.redraw(false, false);
  }

  get size() {
    return this.points.size;
  }

  schedule() {
    if (this.pending) return;
    this.pending = true;
    requestAnimationFrame(() => {
      this.pending = false;
      this.render();
    });
  }

  /** The plot's columns: the steps, each key's line (smoothed when the view is), the
   *  first key's min and max (downsampled buckets), then, smoothed, each key's
   *  logged values (the faint lines). */
  data() {
    const steps = [...this.points.keys()].sort((a, b) => a - b);
    const cols = [steps];
    const raw = this.keys.map((_, k) => steps.map((s) => this.points.get(s)[k]));
    const w = this.smoothing;
    raw.forEach((col) => cols.push(w > 0 ? ema(col, w) : col));
    if (this.band && this.minmax.size) {
      cols.push(steps.map((s) => (this.minmax.get(s) || [null, null])[0]));
      cols.push(steps.map((s) => (this.minmax.get(s) || [null, null])[1]));
    }
    if (w > 0) cols.push(...raw);
    return cols;
  }

  /** Why the values drawn cannot go on a log scale (one at or below 0), or null. */
  _logRefusal(data) {
    let low = Infinity;
    for (const col of data.slice(1)) for (const v of col) if (v !== null && v < low) low = v;
    if (low === Infinity) return "nothing to draw on a log scale yet";
    return low <= 0 ? `a log scale needs every value above 0 (lowest here: ${fmt(low)})` : null;
  }

  /** Gone from the page (the "any metric" chart made again, a compare chart
   *  removed): its plot, its resize observer and its place in the view, and no
   *  load or frame still on its way draws it again. */
  destroy() {
    this.dead = true;
    this.resize?.disconnect();
    this.plot?.destroy();
    this.plot = null;
    this.group?.remove(this);
  }

  /** The series hidden from the legend: the view's when its charts share series. */
  get hiddenSeries() {
    return this.group?.sharedSeries ? this.group.hidden : this.hidden;
  }

  render() {
    if (this.dead) return;
    const data = this.data();
    this.onData(data[0].length);
    if (!data[0].length) return;
    const withBand = this.band && this.minmax.size > 0;
    const smooth = this.smoothing > 0;
    // Judged only where a log box asks or listens (not on every frame of every chart).
    const refusal = this.log || this.onLogRoom ? this._logRefusal(data) : null;
    const logOn = this.log && !refusal;
    this.onLogRoom?.(refusal);
    const fixed = this.fixedRight;
    const right = fixed === undefined ? splitScales(data.slice(1, this.keys.length + 1)) : fixed || null;
    // A series of NaN alone is still one: its legend entry and the readout say so.
    const present = data.slice(1, this.keys.length + 1).map((col, k) => col.some((v) => v !== null) || this.odd[k].size > 0);
    const shape = `${withBand}|${right ? right.join(",") : ""}|${present.join(",")}|${smooth}|${logOn}`;
    if (this.plot && this.plot._shape === shape) {
      this.plot.setData(data);
    } else {
      this.plot?.destroy();
      this.right = right;
      this.present = present;
      this.plot = this._create(data, { withBand, right, smooth, logOn });
      this.plot._shape = shape;
    }
    this.logOn = logOn;
    if (this.group?.zoom) this.applyZoom();
    noteOdd(this);
  }

  /** The step axis to the view's zoom, or to every step. */
  applyZoom() {
    const u = this.plot;
    const xs = u?.data[0];
    if (!xs || !xs.length) return;
    const z = this.group?.zoom;
    const [lo, hi] = z || stepRange(xs[0], xs[xs.length - 1]);
    u.setScale("x", { min: lo, max: hi });
  }

  /** The y axes: one titled with the chart's unit, or (split) one per side titled
   *  with the keys it carries, or with ``yTitles`` (what each side counts). */
  _axes(axis, right, logOn) {
    const y = { ...axis, size: axisWidth, values: (u, splits) => (logOn ? logTickLabels(splits) : tickLabels(splits)) };
    // The step axis 40 px tall (uPlot's 50 left 20 px unused): the plot, and the room
    // of a y axis title along it, 10 px taller.
    const x = { ...axis, incrs: STEP_INCRS, label: this.xTitle, labelSize: 20, size: 40 };
    // What each axis title says in full ([names, suffix]); fitTitles (chart_axes.js) shortens them
    // to the room the plot has.
    if (!right) {
      this.titles = [[[this.xTitle], ""], [[this.yTitle], ""]];
      return [x, { ...y, scale: "y", label: this.yTitle, labelSize: 20 }];
    }
    const on = (side) => (this.yTitles ? [this.yTitles[side ? 1 : 0]] : this.labels.filter((_, k) => right[k] === side && this.present[k]));
    const suffix = this.yTitles ? "" : " (right axis)";
    this.titles = [[[this.xTitle], ""], [on(false), ""], [on(true), suffix]];
    return [
      x,
      { ...y, scale: "y", label: axisTitle(on(false)), labelSize: 20 },
      { ...y, scale: "y2", side: 1, label: axisTitle(on(true), suffix), labelSize: 20, grid: { show: false } },
    ];
  }

  _create(data, { withBand, right, smooth, logOn }) {
    const axis = { stroke: cssVar("--muted", "#666"), grid: { stroke: cssVar("--border", "#ddd"), width: 1 }, ticks: { stroke: cssVar("--border", "#ddd") } };
    const series = [{ label: "step" }];
    // Points drawn where they are sparse (uPlot's default): a lone point shows.
    const scaleOf = (k) => (right && right[k] ? "y2" : "y");
    const stroke = (k) => this.colourOf(k);
    const hidden = this.hiddenSeries;
    const shown = (k) => !hidden.has(k + 1);
    // The legend's value at a step a series logged NaN (or ±∞) for says so, not "";
    // smoothed, the value logged there follows.
    const rawAt = 1 + this.keys.length + (withBand ? 2 : 0);
    this.rawAt = smooth ? rawAt : null;
    this.bandAt = withBand ? 1 + this.keys.length : null;
    const value = (k) => (u, v, si, idx) => {
      if (idx === null || idx === undefined) return "--";
      const logged = smooth ? u.data[rawAt + k][idx] : null;
      if (v !== null && v !== undefined) return logged === null ? uPlot.fmtNum(v) : `${uPlot.fmtNum(v)} (logged ${uPlot.fmtNum(logged)})`;
      const odd = this.odd[k].get(u.data[0][idx]);
      return odd === undefined ? "" : oddName(odd);
    };
    // A key not logged at a step (null) is joined over; a NaN or ±∞ leaves a gap: no
    // line pretends to know the value there.
    const gaps = (k) => (u, si, i0, i1, nullGaps) => {
      if (!this.odd[k].size) return [];
      const px = [...this.odd[k].keys()].map((step) => u.valToPos(step, "x", true));
      return nullGaps.filter(([a, b]) => px.some((p) => p >= a - 0.5 && p <= b + 0.5));
    };
    // A key with nothing logged yet has no legend entry (an external trainer may
    // never send it); the plot is made again when it first comes (render's shape).
    this.keys.forEach((key, k) => series.push({
      ...(this.present?.[k] === false ? { class: "u-absent-series" } : {}),
      label: right && right[k] ? `${this.labels[k]} (right axis)` : this.labels[k],
      scale: scaleOf(k), stroke: stroke(k), width: 1.5, spanGaps: false, gaps: gaps(k), points: { size: 6, fill: stroke(k) },
      show: shown(k),
      value: value(k),
    }));
    const bands = [];
    if (withBand) {
      const edge = { stroke: "transparent", points: { show: false }, spanGaps: true, class: "u-band-series", scale: scaleOf(0), show: shown(0) };
      series.push({ ...edge, label: `${this.labels[0]} min` });
      series.push({ ...edge, label: `${this.labels[0]} max` });
      bands.push({ series: [this.bandAt + 1, this.bandAt], fill: "rgba(61,90,254,0.12)" });
    }
    // Smoothed: the logged values as faint lines under the smoothed ones, out of the
    // legend (each smoothed entry names its logged value).
    if (smooth) {
      this.keys.forEach((key, k) => series.push({
        label: `${this.labels[k]} (logged)`, class: "u-raw-series", scale: scaleOf(k), stroke: `${stroke(k)}59`,
        width: 1, spanGaps: false, gaps: gaps(k), points: { show: false }, show: shown(k),
      }));
    }
    // Log: uPlot's decades, with the room for NaN/±∞ marks made in log space (a
    // scale with no value above 0, every line hidden, gets one decade).
    const logRange = (u, min, max) => {
      if (!(min > 0 && max > 0)) return [1, 10];
      const [lo, hi] = uPlot.rangeLog(min, max, 10, true).map(Math.log10);
      return roomForMarks(self, u, [lo, hi]).map((v) => 10 ** v);
    };
    const yScale = (u, min, max) => (logOn ? logRange(u, min, max) : roomForMarks(self, u, yRange(min, max)));
    const width = Math.max(240, this.el.clientWidth || 400);
    const self = this;
    const opts = {
      width,
      height: 220,
      series,
      bands,
      legend: { live: true },
      // In a view: the cursor shared by the view's charts, a drag zooms all of them
      // (chart_view.selected), a double click shows every step again on all of them.
      cursor: {
        // A click that wobbles a pixel or two is a click, not a zoom to a sliver.
        // (uPlot swallows the click at the end of any drag: one under 5 px opens
        // its step.)
        drag: {
          x: true, y: false, setScale: !this.group, dist: 5,
          click: (u, e) => {
            if (Math.abs(e.clientX - (self.downX ?? e.clientX)) < 5) return;
            e.stopPropagation();
            e.stopImmediatePropagation();
          },
        },
        points: { size: 6 },
        ...(this.group ? {
          // The step line alone: a value line drawn across the other charts at the
          // same height would read a value they do not have.
          y: false,
          sync: { key: this.group.syncKey, setSeries: this.group.sharedSeries },
          bind: { dblclick: () => () => { self.group.zoomTo(null); return null; } },
        } : {}),
      },
      scales: {
        x: { time: false, range: (u, min, max) => stepRange(min, max) },
        // Room at the top (bottom) edge for the marks of NaN, +∞ (−∞): none covers a
        // point (on a log scale too: yScale).
        y: { range: yScale, distr: logOn ? 3 : 1, log: 10 },
        y2: { range: yScale, distr: logOn ? 3 : 1, log: 10 },
      },
      axes: this._axes(axis, right, logOn),
      hooks: {
        draw: [(u) => self._drawAlerts(u), (u) => placeOddMarks(self, u), (u) => placeTitleTips(self, u)],
        setSelect: [(u) => selected(self, u)],
        setSeries: [(u, si, o) => seriesShown(self, u, si, o)],
        ready: [(u) => fitTitles(self, u), (u) => pickOnClick(self, u)],
      },
    };
    const plot = new uPlot(opts, data, this.el);
    if (!this.resize) {
      this.resize = new ResizeObserver(() => {
        const w = Math.max(240, this.el.clientWidth);
        if (this.plot && Math.abs(this.plot.width - w) > 4) this.plot.setSize({ width: w, height: 220 });
      });
      this.resize.observe(this.el);
    }
    return plot;
  }

  /** Keyboard: the plot is a focusable group named after the chart; ← → move along
   *  the steps (Home, End: first, last), Enter opens the step under the readout. */
  _focusable(name) {
    this.el.tabIndex = 0;
    this.el.setAttribute("role", "group");
    this.el.setAttribute("aria-roledescription", "chart");
    this.setName(name);
    // A plot element reused by another chart (the "any metric" picker) answers it only.
    if (this.el._chartKeys) this.el.removeEventListener("keydown", this.el._chartKeys);
    this.el._chartKeys = (ev) => this._key(ev);
    this.el.addEventListener("keydown", this.el._chartKeys);
    this.el.addEventListener("blur", () => this.plot?.setCursor({ left: -10, top: -10 }));
  }

  /** What a screen reader calls the plot (a chart renamed live: run_charts_live.js). */
  setName(name) {
    this.el.setAttribute("aria-label", `${name.replace(/\.\s*$/, "")}. Arrow keys read the points, Enter opens the step.`);
  }

  _key(ev) {
    const u = this.plot;
    if (!u || !u.data[0].length) return;
    // The steps shown (a zoom shows some): the keys read those.
    const [first, last] = u.series[0].idxs || [0, u.data[0].length - 1];
    const inView = this.cursorIdx !== null && this.cursorIdx !== undefined && this.cursorIdx >= first && this.cursorIdx <= last;
    const at = inView ? this.cursorIdx : null;
    const moves = { ArrowRight: 1, ArrowLeft: -1, PageUp: 10, PageDown: -10 };
    let idx = at;
    if (ev.key in moves) idx = at === null ? (moves[ev.key] > 0 ? first : last) : at + moves[ev.key];
    else if (ev.key === "Home") idx = first;
    else if (ev.key === "End") idx = last;
    else if (ev.key === "Enter" && at !== null && this.onPick) {
      ev.preventDefault();
      this.onPick(u.data[0][at]);
      return;
    } else return;
    ev.preventDefault();
    this.readAt(Math.max(first, Math.min(last, idx)));
  }

  /** Move the cursor (and the legend) to point ``idx`` and say its values. */
  readAt(idx) {
    const u = this.plot;
    this.cursorIdx = idx;
    const step = u.data[0][idx];
    const k0 = this.keys.findIndex((_, k) => u.data[k + 1][idx] !== null);
    const scale = this.right && this.right[Math.max(0, k0)] ? "y2" : "y";
    const v = k0 >= 0 ? u.data[k0 + 1][idx] : null;
    const top = v === null ? u.bbox.height / devicePixelRatio / 2 : u.valToPos(v, scale);
    u.setCursor({ left: u.valToPos(step, "x"), top }, true, true); // the view's other charts follow
    const valueAt = (k) => u.data[k + 1][idx] ?? this.odd[k].get(step) ?? null;
    const logged = (k) => (this.rawAt !== null && u.data[k + 1][idx] !== null ? ` (logged ${fmt(u.data[this.rawAt + k][idx])})` : "");
    const parts = this.keys.flatMap((_, k) => (this.present?.[k] === false ? [] : [`${this.labels[k]} ${fmt(valueAt(k))}${logged(k)}`]));
    const text = `step ${step}: ${parts.join(", ")}`;
    if (this.readout) this.readout.textContent = text;
    return text;
  }

  _drawAlerts(u) {
    if (!this.alerts.length) return;
    const ctx = u.ctx;
    const [lo, hi] = [u.scales.x.min, u.scales.x.max];
    ctx.save();
    ctx.strokeStyle = cssVar("--bad", "#c62828");
    ctx.setLineDash([4, 3]);
    ctx.lineWidth = 1.2 * devicePixelRatio;
    for (const step of this.alerts) {
      if (step < lo || step > hi) continue;
      const x = Math.round(u.valToPos(step, "x", true));
      ctx.beginPath();
      ctx.moveTo(x, u.bbox.top);
      ctx.lineTo(x, u.bbox.top + u.bbox.height);
      ctx.stroke();
    }
    ctx.restore();
  }
}

/** Fetch downsampled series for many keys, in chunks the API accepts. */
export async function fetchSeries(metricsUrl, keys, points, sinceStep = -1) {
  const out = {};
  let bucketWidth = 1;
  const chunks = [];
  for (let i = 0; i < keys.length; i += 32) chunks.push(keys.slice(i, i + 32));
  await Promise.all(
    chunks.map(async (chunk) => {
      const url = `${metricsUrl}?keys=${encodeURIComponent(chunk.join(","))}&points=${points}&since_step=${sinceStep}`;
      const r = await fetch(url, { credentials: "same-origin" });
      if (!r.ok) throw new Error(`metrics: ${r.status}`);
      const body = await r.json();
      Object.assign(out, body.series || {});
      bucketWidth = Math.max(bucketWidth, body.bucket_width || 1);
    }),
  );
  return { series: out, bucketWidth };
}
