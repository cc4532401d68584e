// A task's history (issue 12.3): the series computed on the server (json_script
// "task-data") drawn on a MetricChart; on a single run's page a click opens that
// step's groups.

import { MetricChart } from "./chart.js";
import { readJSONScript } from "./util.js";

const data = readJSONScript("task-data");
window.__taskCharts = []; // for tests: each chart's uPlot
for (const spec of data.charts) {
  const section = document.querySelector(`[data-chart="${CSS.escape(spec.id)}"]`);
  if (!section) continue;
  const chart = new MetricChart(section.querySelector("[data-plot]"), {
    keys: spec.keys,
    labels: spec.labels,
    band: false,
    name: `${section.querySelector("h3 span")?.textContent || "The task"}: ${section.querySelector("[data-chart-help]")?.textContent || ""}`,
    xTitle: "training step",
    yTitle: spec.y_title || "reward / advantage",
    readout: section.querySelector("[data-readout]"),
    onPick: data.steps_url ? (step) => { window.location.href = `${data.steps_url}?step=${Math.round(step)}`; } : undefined,
    onData: (n) => { section.dataset.points = String(n); },
  });
  chart.load(spec.series);
  window.__taskCharts.push(chart);
}
