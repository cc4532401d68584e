// Compare: overlaid charts of any metric, one series per run. Each run's series comes
// from its own metrics API call; the x axis is the union of their steps. Drawn by the
// run page's MetricChart (one y axis: runs are compared on one scale), so a NaN or
// +-inf a run logged breaks its line and is marked at its step as it is there (a NaN
// was bridged by a straight line, a NaN at the last step silently dropped).
//
// - A run's line is read from its own key of the chart's meaning (the server's
//   `sources`, from trainer/metric_names.py: a TRL run's learning_rate on the lr
//   chart); where the runs' keys differ, the legend names each one's.
// - A run keeps its colour whatever the order of ?runs= (the server's `colour`).
// - The charts shown are kept in the URL (?charts=a,b; none: the page's defaults), so
//   a reload or a shared link opens the same ones.
// - compare_live.js says when live runs moved on ("compare:refreshed"): their lines
//   are read again.

import { MetricChart } from "./chart.js";
import { ChartGroup, chartTools, logToggle } from "./chart_view.js";
import { el, getJSON, readJSONScript } from "./util.js";

const data = readJSONScript("compare-data");
const holder = document.querySelector("[data-compare-charts]");
const select = document.querySelector("[data-compare-key]");
const POINTS = 800;
const overlays = []; // {key, section, plotEl, readout, chart, series}
const charts = [];
// One view over the overlays: smoothing, cursor, zoom, and a run hidden from one
// chart's legend hidden from all (chart_view.js).
const view = new ChartGroup("compare-charts", "compare", { sharedSeries: true });
chartTools(document.querySelector("[data-chart-tools]"), view);
window.__chartView = view; // tests read it
// For tests: each overlay's uPlot (scales, axis labels) and its MetricChart.
Object.defineProperty(window, "__compareCharts", { get: () => charts.map((c) => c.plot).filter(Boolean) });
window.__compareMetricCharts = charts;

const sourceOf = (run, key) => (run.sources || {})[key] || key;
const mixed = (key) => data.runs.some((r) => sourceOf(r, key) !== key);

/** The charts shown, in the URL (and in the task form, which reloads the page):
 * nothing when they are the page's defaults. */
function saveCharts() {
  const keys = overlays.map((o) => o.key);
  const defaults = keys.length === data.default_charts.length && keys.every((k, i) => k === data.default_charts[i]);
  // The other parameters as they were (?runs=a,b keeps its commas), charts last.
  const params = window.location.search.slice(1).split("&").filter((p) => p && !/^charts(=|$)/.test(p));
  if (!defaults) {
    // Keys joined by commas; one holding a comma in a parameter of its own.
    const plain = keys.filter((k) => !k.includes(","));
    if (plain.length || !keys.length) params.push(`charts=${plain.map(encodeURIComponent).join(",")}`);
    for (const k of keys.filter((k) => k.includes(","))) params.push(`charts=${encodeURIComponent(k)}`);
  }
  const query = params.length ? `?${params.join("&")}` : "";
  window.history.replaceState(window.history.state, "", `${window.location.pathname}${query}${window.location.hash}`);
  const field = document.querySelector("[data-charts-field]");
  if (field) {
    field.value = keys.join(",");
    field.disabled = defaults;
  }
}

/** One run's series of ``key`` (read from its own key of that meaning), or null. */
async function runSeries(run, key) {
  const source = sourceOf(run, key);
  const body = await getJSON(`${run.metrics_url}?keys=${encodeURIComponent(source)}&points=${POINTS}`);
  const s = (body.series || {})[source];
  return s && s.step.length ? s : null;
}

function draw(o) {
  if (!Object.keys(o.series).length) {
    if (!o.section.querySelector(".nodata")) {
      o.readout.hidden = true;
      o.section.append(el("p", { class: "nodata", text: "No run has this metric." }));
    }
    return;
  }
  o.section.querySelector(".nodata")?.remove();
  o.readout.hidden = false;
  if (!o.chart) {
    const lined = mixed(o.key);
    o.chart = new MetricChart(o.plotEl, {
      keys: data.runs.map((r) => r.id),
      // where the runs' keys differ, each line says which it is
      labels: data.runs.map((r) => (lined ? `${r.name} (${sourceOf(r, o.key)})` : r.name)),
      colours: data.runs.map((r) => r.colour),
      name: `${o.key} of each run`,
      yTitle: o.key,
      readout: o.readout,
      band: false,
      right: false,
      group: view,
    });
    logToggle(o.section.querySelector("h3"), o.chart, `metric:${o.key}`, view, o.key);
    charts.push(o.chart);
  }
  o.chart.load(o.series);
}

async function overlay(key, { save = true } = {}) {
  const open = overlays.find((o) => o.key === key);
  if (open) {
    open.section.scrollIntoView({ block: "nearest" });
    return;
  }
  const section = el("section", { class: "panel chart", "data-compare-chart": key },
    el("h3", {}, el("span", { text: key }), el("button", { type: "button", class: "linklike small", text: "remove" })));
  const plotEl = el("div", { class: "plot" });
  const readout = el("p", { class: "small chart-readout", "aria-live": "polite" });
  section.append(plotEl, readout);
  const other = data.runs.filter((r) => sourceOf(r, key) !== key);
  if (other.length) {
    const names = other.map((r) => `${r.name}: ${sourceOf(r, key)}`).join("; ");
    section.append(el("p", { class: "small muted", "data-chart-sources": "", text: `Lined up by meaning (each trainer's name for ${key}): ${names}.` }));
  }
  holder.append(section);
  const o = { key, section, plotEl, readout, chart: null, series: {} };
  overlays.push(o);
  if (save) saveCharts();
  section.querySelector("button").addEventListener("click", () => {
    section.remove();
    overlays.splice(overlays.indexOf(o), 1);
    const i = charts.indexOf(o.chart);
    if (i >= 0) charts.splice(i, 1);
    o.chart?.destroy(); // out of the view and the shared cursor; a draw on its way does nothing
    saveCharts();
  });
  await Promise.all(data.runs.map((r) => readLine(o, r)));
  if (!o.section.isConnected) return; // removed while it loaded
  draw(o);
  // The chart draws on the next frame.
  await new Promise((resolve) => requestAnimationFrame(() => resolve()));
  section.dataset.ready = "1";
}

/** Read run ``r``'s line of chart ``o``; only the newest read of a line is kept (an
 * older answer that comes later is dropped), and a failed one keeps what it had. */
async function readLine(o, r) {
  o.asked ||= {};
  const mine = (o.asked[r.id] = (o.asked[r.id] || 0) + 1);
  try {
    const s = await runSeries(r, o.key);
    if (s && o.asked[r.id] === mine) o.series[r.id] = s;
  } catch {
    /* kept as it was: the next refresh tries again */
  }
}

/** Live runs moved on: their lines on every chart read again. One refresh at a time:
 * runs asked for meanwhile are read when it is done. */
const waiting = new Set();
let refreshing = false;
async function refresh(ids) {
  for (const id of ids) waiting.add(id);
  if (refreshing) return;
  refreshing = true;
  try {
    while (waiting.size) {
      const runs = data.runs.filter((r) => waiting.has(r.id));
      waiting.clear();
      const shown = overlays.slice();
      await Promise.all(shown.flatMap((o) => runs.map((r) => readLine(o, r))));
      for (const o of shown) if (o.section.isConnected) draw(o);
      document.body.dataset.compareChartRefreshes = String(Number(document.body.dataset.compareChartRefreshes || 0) + 1);
    }
  } finally {
    refreshing = false;
  }
}

document.addEventListener("compare:refreshed", (e) => refresh(e.detail?.runs || []));
document.querySelector("[data-add-chart]")?.addEventListener("click", () => overlay(select.value));
for (const key of data.charts || []) overlay(key, { save: false });
saveCharts(); // the URL as shown: keys the server left out are gone from it
