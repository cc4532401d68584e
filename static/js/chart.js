// A metric chart on uPlot: several keys against the training step, the downsampled
// series from the API (last value per bucket, with the first key's min/max as a band),
// live points appended as frames arrive, alert steps drawn as dashed lines, and a
// click on the plot reporting the step under the cursor.

import uPlot from "../vendor/uplot/uPlot.esm.js";
import { cssVar, num } from "./util.js";

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
// labelled 1, 1.25, 1.5, ...).
const STEP_INCRS = [1, 2, 5].flatMap((m) => [1, 10, 100, 1e3, 1e4, 1e5, 1e6].map((p) => m * p)).sort((a, b) => a - b);

export function tickLabels(splits) {
  if (!splits.length) return [];
  const finite = splits.filter((v) => v !== null && Number.isFinite(v));
  const big = Math.max(0, ...finite.map(Math.abs));
  const [div, suffix] = big >= 1e6 ? [1e6, "M"] : big >= 1e4 ? [1e3, "k"] : [1, ""];
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

/** The y range: uPlot's padded range, except that a flat series sits in a small
 *  band around its value (all-zero clip ratios on 0..1, not on 0..100). */
export function yRange(min, max) {
  if (min === null || max === null || !Number.isFinite(min) || !Number.isFinite(max)) return [0, 1];
  if (min === max) {
    if (min === 0) return [0, 1];
    const pad = Math.abs(min) * 0.1;
    return [min - pad, max + pad];
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

export class MetricChart {
  /**
   * @param {HTMLElement} plotEl where the plot goes
   * @param {{keys: string[], labels?: string[], onPick?: (step:number)=>void, band?: boolean}} opts
   */
  constructor(plotEl, opts) {
    this.el = plotEl;
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
    if (this.plot && this.plot._withBand === withBand) {
      this.plot.setData(data);
      return;
    }
    this.plot?.destroy();
    this.plot = this._create(data, withBand);
    this.plot._withBand = withBand;
  }

  _create(data, withBand) {
    const axis = { stroke: cssVar("--muted", "#666"), grid: { stroke: cssVar("--border", "#ddd"), width: 1 }, ticks: { stroke: cssVar("--border", "#ddd") } };
    const series = [{ label: "step" }];
    this.keys.forEach((key, k) => series.push({ label: this.labels[k], stroke: colour(k), width: 1.5, spanGaps: true, points: { show: false } }));
    const bands = [];
    if (withBand) {
      const n = this.keys.length;
      const hidden = { stroke: "transparent", points: { show: false }, spanGaps: true, class: "u-band-series" };
      series.push({ ...hidden, label: `${this.labels[0]} min` });
      series.push({ ...hidden, label: `${this.labels[0]} max` });
      bands.push({ series: [n + 2, n + 1], fill: "rgba(61,90,254,0.12)" });
    }
    const width = Math.max(240, this.el.clientWidth || 400);
    const self = this;
    const opts = {
      width,
      height: 200,
      series,
      bands,
      legend: { live: true },
      cursor: { drag: { x: true, y: false }, points: { size: 6 } },
      scales: { x: { time: false }, y: { range: (u, min, max) => yRange(min, max) } },
      axes: [{ ...axis, incrs: STEP_INCRS }, { ...axis, size: axisWidth, values: (u, splits) => tickLabels(splits) }],
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
        if (this.plot && Math.abs(this.plot.width - w) > 4) this.plot.setSize({ width: w, height: 200 });
      });
      this.resize.observe(this.el);
    }
    return plot;
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
