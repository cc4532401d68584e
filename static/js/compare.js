// Compare: overlaid charts of any metric, one series per run. Each run's series comes
// from its own metrics API call; the x axis is the union of their steps. Drawn by the
// run page's MetricChart (one y axis: runs are compared on one scale), so a NaN or
// +-inf a run logged breaks its line and is marked at its step as it is there (a NaN
// was bridged by a straight line, a NaN at the last step silently dropped).

import { MetricChart } from "./chart.js";
import { el, getJSON, readJSONScript } from "./util.js";

const data = readJSONScript("compare-data");
const holder = document.querySelector("[data-compare-charts]");
const select = document.querySelector("[data-compare-key]");
const charts = [];
// For tests: each overlay's uPlot (scales, axis labels) and its MetricChart.
Object.defineProperty(window, "__compareCharts", { get: () => charts.map((c) => c.plot).filter(Boolean) });
window.__compareMetricCharts = charts;

async function overlay(key) {
  const section = el("section", { class: "panel chart", "data-compare-chart": key },
    el("h3", {}, el("span", { text: key }), el("button", { type: "button", class: "linklike small", text: "remove" })));
  const plotEl = el("div", { class: "plot" });
  const readout = el("p", { class: "small chart-readout", "aria-live": "polite" });
  section.append(plotEl, readout);
  holder.append(section);
  let chart = null;
  section.querySelector("button").addEventListener("click", () => {
    section.remove();
    const i = charts.indexOf(chart);
    if (i >= 0) charts.splice(i, 1);
  });
  const points = 800;
  const bodies = await Promise.all(
    data.runs.map((r) => getJSON(`${r.metrics_url}?keys=${encodeURIComponent(key)}&points=${points}`).catch(() => ({ series: {} }))),
  );
  // One series per run, keyed by the run's id (names may repeat).
  const series = {};
  bodies.forEach((b, i) => {
    const s = (b.series || {})[key];
    if (s && s.step.length) series[data.runs[i].id] = s;
  });
  if (!Object.keys(series).length) {
    readout.remove();
    section.append(el("p", { class: "nodata", text: "No run has this metric." }));
    return;
  }
  chart = new MetricChart(plotEl, {
    keys: data.runs.map((r) => r.id),
    labels: data.runs.map((r) => r.name),
    name: `${key} of each run`,
    yTitle: key,
    readout,
    band: false,
    right: false,
  });
  charts.push(chart);
  chart.load(series);
  // The chart draws on the next frame.
  await new Promise((resolve) => requestAnimationFrame(() => resolve()));
  section.dataset.ready = "1";
}

document.querySelector("[data-add-chart]")?.addEventListener("click", () => overlay(select.value));
overlay(data.default_key && data.keys.includes(data.default_key) ? data.default_key : data.keys[0]);
for (const key of data.extra_keys || []) overlay(key);
