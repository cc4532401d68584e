// A page's charts seen as one view, as a W&B workspace's are: one smoothing for every
// line, a cursor shared by every chart (the same step read on all of them), one zoom
// on the step axis (drag on any chart; a double click goes back to every step), and
// a log scale per chart. The page's choices are kept in the browser (localStorage),
// the same for every run: a reload, another run or the compare page opens as left.
//
// Smoothing is TensorBoard's: an exponential moving average over the points the page
// loaded (a downsampled series' buckets, steps outside a zoom too), debiased at the
// start (so the first point is its own value, not pulled to 0), with a value that is
// not a number skipped (its gap stays a gap). The logged values stay on the plot as a
// faint line, and the legend and readout say both.
//
// Also here, for chart.js: what a chart in a view does with the legend (seriesShown),
// a drag (selected) and a click (pickOnClick).

import { el } from "./util.js";

const SMOOTHING_KEY = "agentic-rl:chart-smoothing";
const LOG_KEY = "agentic-rl:chart-log";
export const MAX_SMOOTHING = 0.99;

function stored(key, fallback) {
  try {
    const raw = window.localStorage.getItem(key);
    return raw === null ? fallback : JSON.parse(raw);
  } catch {
    return fallback; // storage refused (a private window) or a value not ours
  }
}

function store(key, value) {
  try {
    window.localStorage.setItem(key, JSON.stringify(value));
  } catch {
    /* not kept: the page still works */
  }
}

/** The smoothed values of ``values`` (nulls kept null) at ``weight`` in [0, 1). */
export function ema(values, weight) {
  if (!(weight > 0)) return values.slice();
  const out = new Array(values.length).fill(null);
  let last = 0;
  let n = 0;
  for (let i = 0; i < values.length; i++) {
    const v = values[i];
    if (v === null || v === undefined || !Number.isFinite(v)) continue;
    last = last * weight + (1 - weight) * v;
    n += 1;
    out[i] = last / (1 - weight ** n);
  }
  return out;
}

/** A smoothing weight as given (a number or text) clamped to [0, MAX_SMOOTHING];
 *  0 for anything that is not a number. */
export function clampSmoothing(w) {
  const x = typeof w === "number" || typeof w === "string" ? Number(w) : NaN;
  return Number.isFinite(x) ? Math.min(MAX_SMOOTHING, Math.max(0, x)) : 0;
}

export class ChartGroup {
  /** ``name``: the uPlot sync key (one per page) and where the log choices of its
   *  charts are kept (``page``: "run", "compare"); ``sharedSeries``: its charts
   *  draw the same series in the same order (compare's runs), so a line hidden
   *  from one legend is hidden on every chart. */
  constructor(name, page, { sharedSeries = false } = {}) {
    this.syncKey = name;
    this.page = page;
    this.sharedSeries = sharedSeries;
    this.charts = new Set();
    this.smoothing = clampSmoothing(stored(SMOOTHING_KEY, 0));
    this.zoom = null; // [min, max] of the step axis, or null: every step
    this.hidden = new Set(); // sharedSeries: the series hidden from the legends
    const logs = stored(LOG_KEY, {})?.[page];
    this.logs = new Set(Array.isArray(logs) ? logs.map(String) : []);
  }

  add(chart) {
    this.charts.add(chart);
  }

  remove(chart) {
    this.charts.delete(chart);
  }

  setSmoothing(w) {
    const next = clampSmoothing(w);
    if (next === this.smoothing) return;
    this.smoothing = next;
    store(SMOOTHING_KEY, next);
    for (const c of this.charts) c.schedule(); // a slider's every pixel: one draw a frame
  }

  /** Is chart ``id`` asked to be on a log scale? */
  wantsLog(id) {
    return this.logs.has(id);
  }

  setLog(id, on) {
    if (on) this.logs.add(id);
    else this.logs.delete(id);
    const all = stored(LOG_KEY, {});
    store(LOG_KEY, { ...(all && typeof all === "object" && !Array.isArray(all) ? all : {}), [this.page]: [...this.logs] });
  }

  /** Every chart to steps [min, max], or (null) back to all of its steps. A range
   *  the same as the one shown is not applied again (a drag reaches each synced
   *  chart's hooks). */
  zoomTo(range) {
    if (range && !(range[1] > range[0])) return;
    const same = (a, b) => (a === null ? b === null : b !== null && Math.abs(a[0] - b[0]) + Math.abs(a[1] - b[1]) <= 1e-9 * (Math.abs(a[1]) + 1));
    if (same(this.zoom, range)) return;
    this.zoom = range;
    for (const c of this.charts) c.applyZoom();
    this.onZoom?.(!!range);
  }
}

/** The page's chart tools: a smoothing slider with its value beside it, and what a
 *  drag and a double click do. */
export function chartTools(holder, group) {
  if (!holder) return;
  const id = `smoothing-${group.syncKey}`;
  const range = el("input", {
    type: "range", id, min: "0", max: String(MAX_SMOOTHING), step: "0.01", value: String(group.smoothing),
    "data-smoothing": "", "aria-describedby": `${id}-help`,
  });
  const number = el("input", {
    type: "number", min: "0", max: String(MAX_SMOOTHING), step: "0.01", value: String(group.smoothing),
    class: "smoothing-value", "data-smoothing-value": "", "aria-label": "smoothing weight",
  });
  const set = (v, from) => {
    const w = clampSmoothing(v);
    if (from !== range) range.value = String(w);
    if (from !== number) number.value = String(w);
    group.setSmoothing(w);
  };
  range.addEventListener("input", () => set(range.value, range));
  number.addEventListener("change", () => set(number.value, null));
  const reset = el("button", { type: "button", class: "linklike small", "data-zoom-reset": "", hidden: "", text: "show every step" });
  reset.addEventListener("click", () => group.zoomTo(null));
  group.onZoom = (zoomed) => { reset.hidden = !zoomed; };
  holder.replaceChildren(
    el("label", { for: id }, "Smoothing "), range, " ", number, " ",
    el("span", { class: "small muted", id: `${id}-help` },
      "exponential moving average (0: the logged values; the faint line keeps them). Drag across a chart to zoom every chart to those steps; double-click to see every step again."),
    " ", reset,
  );
}

let logBoxes = 0; // for each box's own description id

/** A "log scale" box in a chart's heading (``name``: the chart's, for its label):
 *  on when the chart's values allow it (all above 0), off with the reason when they
 *  do not (its tooltip, and its description for a screen reader). */
export function logToggle(heading, chart, id, group, name) {
  logBoxes += 1;
  const why = el("span", { class: "sr-only", id: `log-why-${logBoxes}` });
  const box = el("input", {
    type: "checkbox", "data-log-scale": id, "aria-label": `log scale: ${name}`, "aria-describedby": why.id,
  });
  // Shown once the chart has values to judge by.
  const label = el("label", { class: "small log-toggle", hidden: "" }, box, " log scale", why);
  const button = heading.querySelector("button"); // compare's "remove" stays last
  if (button) button.before(label, " ");
  else heading.append(" ", label);
  box.checked = group.wantsLog(id);
  chart.log = box.checked;
  box.addEventListener("change", () => {
    group.setLog(id, box.checked);
    chart.log = box.checked;
    chart.render();
  });
  // The chart says after each render whether its values allow a log scale.
  chart.onLogRoom = (reason) => {
    label.hidden = false;
    box.disabled = !!reason && !box.checked;
    const said = reason ? `${reason}: shown on a linear scale` : "";
    label.title = said;
    why.textContent = said;
    label.classList.toggle("muted", !!reason);
    label.dataset.logRefused = reason || "";
  };
}

/** A chart's (MetricChart's) line hidden or shown from the legend: remembered (a
 *  plot made again keeps it), and its faint logged line and band follow it, also
 *  when uPlot's isolate (Ctrl/Cmd-click) walks every series. */
export function seriesShown(chart, u, si, o) {
  const n = chart.keys.length;
  if (!(si >= 1) || o?.show === undefined) return;
  const follow = (i, show) => {
    if (u.series[i] && u.series[i].show !== show) u.setSeries(i, { show }, false, false);
  };
  if (si <= n) {
    if (o.show) chart.hiddenSeries.delete(si);
    else chart.hiddenSeries.add(si);
    if (chart.rawAt !== null) follow(chart.rawAt + si - 1, o.show);
    if (si === 1 && chart.bandAt !== null) [0, 1].forEach((j) => follow(chart.bandAt + j, o.show));
  } else if (chart.rawAt !== null && si >= chart.rawAt) {
    follow(si, u.series[si - chart.rawAt + 1].show);
  } else if (chart.bandAt !== null && si >= chart.bandAt) {
    follow(si, u.series[1].show);
  }
}

/** A drag across the plot: every chart of the view zoomed to its steps (a
 *  range holding fewer than two of this chart's steps is not a zoom). */
export function selected(chart, u) {
  if (!chart.group || !(u.select.width > 0)) return;
  const a = u.posToVal(u.select.left, "x");
  const b = u.posToVal(u.select.left + u.select.width, "x");
  u.setSelect({ left: 0, top: 0, width: 0, height: 0 }, false);
  if (u.data[0].filter((x) => x >= a && x <= b).length < 2) return;
  chart.group.zoomTo([a, b]);
}

/** A click on the plot opens the step under the cursor (``onPick``; uPlot
 *  swallows the click that ends a drag). While a view is zoomed a double click
 *  shows every step again: there a click waits that long before it opens. */
export function pickOnClick(chart, u) {
  u.over.addEventListener("mousedown", (e) => { chart.downX = e.clientX; });
  if (!chart.onPick) return;
  let timer = 0;
  u.over.addEventListener("click", (e) => {
    const idx = u.cursor.idx;
    if (idx === null || idx === undefined) return;
    const step = u.data[0][idx];
    clearTimeout(timer);
    if (!chart.group?.zoom) chart.onPick(step);
    else if (e.detail < 2) timer = setTimeout(() => chart.onPick(step), 450);
  });
  u.over.addEventListener("dblclick", () => clearTimeout(timer));
}
