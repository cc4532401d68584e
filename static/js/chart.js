// A metric chart on uPlot: several keys against the training step, the downsampled
// series from the API (last value per bucket, with the first key's min/max as a band),
// live points appended as frames arrive, alert steps drawn as dashed lines, and a
// click on the plot reporting the step under the cursor. Series whose scales differ by
// two orders of magnitude or more get a second y axis (issue 22.10b); both axes carry
// a title; a lone point is drawn as a dot; the plot is focusable and the arrow keys
// move a readout along the steps (issue 22.11).

import uPlot from "../vendor/uplot/uPlot.esm.js";
import { cssVar, fmt, num } from "./util.js";

const PALETTE = ["#3d5afe", "#e8590c", "#2b8a3e", "#ae3ec9", "#1098ad", "#f59f00", "#d6336c", "#5c940d"];

export function colour(i) {
  return PALETTE[i % PALETTE.length];
}

function finiteOrNull(v) {
  const x = num(v);
  return x === null || !Number.isFinite(x) ? null : x;
}

/** Tick labels with just enough decimals to tell neighbours apart and to say each
 *  value truly (not "3.978, 3.978"); thousands and millions as k / M so a label such
 *  as 10,000 fits the axis. */
// The x axis counts training steps: whole-number ticks only (a 6-step run was
// labelled 1, 1.25, 1.5, ...). Every chart with a step axis uses these (compare.js too).
export const STEP_INCRS = [1, 2, 5].flatMap((m) => [1, 10, 100, 1e3, 1e4, 1e5, 1e6].map((p) => m * p)).sort((a, b) => a - b);

export function tickLabels(splits) {
  if (!splits.length) return [];
  const finite = splits.filter((v) => v !== null && Number.isFinite(v));
  const big = Math.max(0, ...finite.map(Math.abs));
  const [div, suffix] = big >= 1e6 ? [1e6, "M"] : big >= 1e4 ? [1e3, "k"] : [1, ""];
  if (big > 0 && big < 1e-3) return tinyLabels(splits); // not "0.00000030"
  const scaled = splits.map((v) => (v === null ? null : v / div));
  const gaps = scaled.slice(1).map((v, i) => Math.abs(v - scaled[i])).filter((g) => g > 0);
  const step = gaps.length ? Math.min(...gaps) : Math.abs(scaled[0]) || 1;
  for (let dec = 0; dec <= 12; dec++) {
    const labels = scaled.map((v) => (v === null ? "" : v.toFixed(dec)));
    const exact = scaled.every((v, i) => v === null || Math.abs(Number(labels[i]) - v) <= step * 1e-3);
    if (exact && new Set(labels).size === labels.length) return labels.map((l) => (l && l !== "-0" ? l + suffix : l === "-0" ? "0" : l));
  }
  return scaled.map((v) => (v === null ? "" : v.toPrecision(6) + suffix));
}

/** Ticks of values all under 1e-3 in scientific notation, with the fewest digits
 *  that tell neighbours apart ("2.5e-7", "3e-7"; 0 as "0"). */
function tinyLabels(splits) {
  for (let d = 0; d <= 6; d++) {
    const labels = splits.map((v) => (v === null ? "" : v === 0 ? "0" : v.toExponential(d).replace("e-", "e\u2212")));
    if (new Set(labels).size === labels.length) return labels;
  }
  return splits.map((v) => (v === null ? "" : v.toExponential(6)));
}

/** The y range: uPlot's padded range, except that a flat series sits in a small
 *  band around its value (all-zero clip ratios on 0..1, not on 0..100). "Flat"
 *  includes flat to float noise (ratios of 1 +- 1e-6, a spread under 1e-5 of the value): uPlot's finest tick step
 *  (1e-16) adds nothing to 1.0, and its tick loop then never ended ("Invalid array
 *  length"). */
export function yRange(min, max) {
  if (min === null || max === null || !Number.isFinite(min) || !Number.isFinite(max)) return [0, 1];
  const mag = Math.max(Math.abs(min), Math.abs(max));
  if (max - min <= mag * 1e-5) {
    if (mag === 0) return [0, 1];
    const mid = (min + max) / 2;
    const pad = (Math.abs(mid) || mag) * 0.1;
    return [mid - pad, mid + pad];
  }
  return uPlot.rangeNum(min, max, 0.1, true);
}

/** The y axis as wide as its longest label (uPlot asks again when they change). */
function axisWidth(u, values) {
  if (!values || !values.length) return 48;
  const ctx = u.ctx;
  ctx.save();
  ctx.font = `${12 * devicePixelRatio}px system-ui, -apple-system, sans-serif`;
  const widest = Math.max(...values.map((v) => ctx.measureText(String(v)).width)) / devicePixelRatio;
  ctx.restore();
  return Math.max(40, Math.ceil(widest) + 18);
}

/** An axis title that fits beside a 220-px chart (~28 characters of 12-px text):
 *  the series' names, or where they are longer, their shared prefix (to its last
 *  "/", "_" or ".") with a "*" for the rest; the legend names each series. */
export function axisTitle(names, suffix = "") {
  const MAX = 28;
  const whole = names.join(", ") + suffix;
  if (whole.length <= MAX || names.length < 2) return whole;
  let p = names[0];
  for (const n of names) while (!n.startsWith(p)) p = p.slice(0, -1);
  const cut = Math.max(p.lastIndexOf("/"), p.lastIndexOf("_"), p.lastIndexOf("."));
  const head = cut > 0 ? `${p.slice(0, cut + 1)}*` : `${names[0]} +${names.length - 1}`;
  return (head + suffix).length <= MAX ? head + suffix : head;
}

/** The magnitude split: ``null`` when every series fits one axis, else a boolean per
 *  series, true for those on the second (right) axis: the larger ones, past the
 *  widest gap of at least ``ratio`` between the series' largest absolute values. */
export function splitScales(cols, ratio = 100) {
  const mags = cols.map((col) => {
    let m = 0;
    for (const v of col) if (v !== null && Number.isFinite(v)) m = Math.max(m, Math.abs(v));
    return m > 0 ? Math.log10(m) : null;
  });
  const known = mags.filter((m) => m !== null).sort((a, b) => a - b);
  let cut = null;
  let widest = Math.log10(ratio);
  for (let i = 1; i < known.length; i++) {
    if (known[i] - known[i - 1] >= widest) {
      widest = known[i] - known[i - 1];
      cut = known[i];
    }
  }
  return cut === null ? null : mags.map((m) => m !== null && m >= cut);
}

export class MetricChart {
  /**
   * @param {HTMLElement} plotEl where the plot goes
   * @param {{keys: string[], labels?: string[], onPick?: (step:number)=>void, band?: boolean}} opts
   */
  constructor(plotEl, opts) {
    this.el = plotEl;
    this.xTitle = opts.xTitle || "training step";
    this.yTitle = opts.yTitle || "";
    this.readout = opts.readout || null;
    if (opts.name) this._focusable(opts.name);
    this.keys = opts.keys;
    this.labels = opts.labels || opts.keys;
    this.onPick = opts.onPick;
    this.band = opts.band !== false;
    this.points = new Map(); // step -> Float64 values per key (null when missing)
    this.minmax = new Map(); // step -> [min, max] of the first key (downsampled buckets)
    this.alerts = [];
    this.plot = null;
    this.pending = false;
    this.onData = opts.onData || (() => {});
  }

  /** Replace everything with an API response of /metrics (series per key). */
  load(series, bucketWidth = 1) {
    this.points.clear();
    this.minmax.clear();
    this.downsampled = bucketWidth > 1;
    this.keys.forEach((key, k) => {
      const s = series[key];
      if (!s) return;
      for (let i = 0; i < s.step.length; i++) {
        this._set(s.step[i], k, finiteOrNull(s.last[i]));
        if (k === 0 && this.downsampled && s.min && s.max) this.minmax.set(s.step[i], [finiteOrNull(s.min[i]), finiteOrNull(s.max[i])]);
      }
    });
    this.schedule();
  }

  /** One step's metrics (a live frame or a backfill). */
  add(step, metrics) {
    let hit = false;
    this.keys.forEach((key, k) => {
      if (key in metrics) {
        this._set(step, k, finiteOrNull(metrics[key]));
        hit = true;
      }
    });
    if (hit) this.schedule();
    return hit;
  }

  _set(step, k, v) {
    let row = this.points.get(step);
    if (!row) {
      row = new Array(this.keys.length).fill(null);
      this.points.set(step, row);
    }
    row[k] = v;
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

  data() {
    const steps = [...this.points.keys()].sort((a, b) => a - b);
    const cols = [steps];
    this.keys.forEach((_, k) => cols.push(steps.map((s) => this.points.get(s)[k])));
    if (this.band && this.minmax.size) {
      cols.push(steps.map((s) => (this.minmax.get(s) || [null, null])[0]));
      cols.push(steps.map((s) => (this.minmax.get(s) || [null, null])[1]));
    }
    return cols;
  }

  render() {
    const data = this.data();
    this.onData(data[0].length);
    if (!data[0].length) return;
    const withBand = data.length > this.keys.length + 1;
    const right = splitScales(data.slice(1, this.keys.length + 1));
    const shape = `${withBand}|${right ? right.join(",") : ""}`;
    if (this.plot && this.plot._shape === shape) {
      this.plot.setData(data);
      return;
    }
    this.plot?.destroy();
    this.right = right;
    this.present = data.slice(1, this.keys.length + 1).map((col) => col.some((v) => v !== null));
    this.plot = this._create(data, withBand, right);
    this.plot._shape = shape;
  }

  /** The y axes: one titled with the chart's unit, or (split) one per side titled
   *  with the keys it carries. */
  _axes(axis, right) {
    const y = { ...axis, size: axisWidth, values: (u, splits) => tickLabels(splits) };
    const x = { ...axis, incrs: STEP_INCRS, label: this.xTitle, labelSize: 20 };
    if (!right) return [x, { ...y, scale: "y", label: this.yTitle, labelSize: 20 }];
    const on = (side) => this.labels.filter((_, k) => right[k] === side && this.present[k]);
    return [
      x,
      { ...y, scale: "y", label: axisTitle(on(false)), labelSize: 20 },
      { ...y, scale: "y2", side: 1, label: axisTitle(on(true), " (right axis)"), labelSize: 20, grid: { show: false } },
    ];
  }

  _create(data, withBand, right) {
    const axis = { stroke: cssVar("--muted", "#666"), grid: { stroke: cssVar("--border", "#ddd"), width: 1 }, ticks: { stroke: cssVar("--border", "#ddd") } };
    const series = [{ label: "step" }];
    // Points drawn where they are sparse (uPlot's default): a lone point shows.
    const scaleOf = (k) => (right && right[k] ? "y2" : "y");
    this.keys.forEach((key, k) => series.push({
      label: right && right[k] ? `${this.labels[k]} (right axis)` : this.labels[k],
      scale: scaleOf(k), stroke: colour(k), width: 1.5, spanGaps: true, points: { size: 6, fill: colour(k) },
    }));
    const bands = [];
    if (withBand) {
      const n = this.keys.length;
      const hidden = { stroke: "transparent", points: { show: false }, spanGaps: true, class: "u-band-series", scale: scaleOf(0) };
      series.push({ ...hidden, label: `${this.labels[0]} min` });
      series.push({ ...hidden, label: `${this.labels[0]} max` });
      bands.push({ series: [n + 2, n + 1], fill: "rgba(61,90,254,0.12)" });
    }
    const width = Math.max(240, this.el.clientWidth || 400);
    const self = this;
    const opts = {
      width,
      height: 220,
      series,
      bands,
      legend: { live: true },
      cursor: { drag: { x: true, y: false }, points: { size: 6 } },
      scales: {
        // One step alone: a range around it, not a zero-width scale.
        x: { time: false, range: (u, min, max) => (min === max ? [min - 1, max + 1] : [min, max]) },
        y: { range: (u, min, max) => yRange(min, max) },
        y2: { range: (u, min, max) => yRange(min, max) },
      },
      axes: this._axes(axis, right),
      hooks: {
        draw: [(u) => self._drawAlerts(u)],
        ready: [
          (u) => {
            u.over.addEventListener("click", () => {
              const idx = u.cursor.idx;
              if (idx !== null && idx !== undefined && self.onPick) self.onPick(u.data[0][idx]);
            });
          },
        ],
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
    this.el.setAttribute("aria-label", `${name.replace(/\.\s*$/, "")}. Arrow keys read the points, Enter opens the step.`);
    // A plot element reused by another chart (the "any metric" picker) answers it only.
    if (this.el._chartKeys) this.el.removeEventListener("keydown", this.el._chartKeys);
    this.el._chartKeys = (ev) => this._key(ev);
    this.el.addEventListener("keydown", this.el._chartKeys);
    this.el.addEventListener("blur", () => this.plot?.setCursor({ left: -10, top: -10 }));
  }

  _key(ev) {
    const u = this.plot;
    if (!u || !u.data[0].length) return;
    const n = u.data[0].length;
    const at = this.cursorIdx ?? null;
    const moves = { ArrowRight: 1, ArrowLeft: -1, PageUp: 10, PageDown: -10 };
    let idx = at;
    if (ev.key in moves) idx = at === null ? (moves[ev.key] > 0 ? 0 : n - 1) : at + moves[ev.key];
    else if (ev.key === "Home") idx = 0;
    else if (ev.key === "End") idx = n - 1;
    else if (ev.key === "Enter" && at !== null && this.onPick) {
      ev.preventDefault();
      this.onPick(u.data[0][at]);
      return;
    } else return;
    ev.preventDefault();
    this.readAt(Math.max(0, Math.min(n - 1, idx)));
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
    u.setCursor({ left: u.valToPos(step, "x"), top });
    const parts = this.keys.flatMap((_, k) => (this.present?.[k] === false ? [] : [`${this.labels[k]} ${fmt(u.data[k + 1][idx])}`]));
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
