// Compare: overlaid charts of any metric, one series per run. Each run's series comes
// from its own metrics API call; the x axis is the union of their steps.

import uPlot from "../vendor/uplot/uPlot.esm.js";
import { colour, STEP_INCRS } from "./chart_axes.js";
import { cssVar, el, getJSON, num, readJSONScript } from "./util.js";

const data = readJSONScript("compare-data");
const holder = document.querySelector("[data-compare-charts]");
const select = document.querySelector("[data-compare-key]");
const plots = [];
window.__compareCharts = plots; // for tests: each overlay's uPlot (scales, axis labels)

async function overlay(key) {
  const section = el("section", { class: "panel chart", "data-compare-chart": key },
    el("h3", {}, el("span", { text: key }), el("button", { type: "button", class: "linklike small", text: "remove" })));
  const plotEl = el("div", { class: "plot" });
  section.append(plotEl);
  holder.append(section);
  section.querySelector("button").addEventListener("click", () => {
    section.remove();
    const i = plots.findIndex((p) => p.root.parentElement === plotEl);
    if (i >= 0) plots.splice(i, 1);
  });
  const points = 800;
  const bodies = await Promise.all(
    data.runs.map((r) => getJSON(`${r.metrics_url}?keys=${encodeURIComponent(key)}&points=${points}`).catch(() => ({ series: {} }))),
  );
  const perRun = bodies.map((b) => {
    const s = (b.series || {})[key];
    const m = new Map();
    if (s) s.step.forEach((step, i) => {
      const v = num(s.last[i]);
      m.set(step, v !== null && Number.isFinite(v) ? v : null);
    });
    return m;
  });
  const steps = [...new Set(perRun.flatMap((m) => [...m.keys()]))].sort((a, b) => a - b);
  if (!steps.length) {
    section.append(el("p", { class: "nodata", text: "No run has this metric." }));
    return;
  }
  const cols = [steps, ...perRun.map((m) => steps.map((s) => (m.has(s) ? m.get(s) : null)))];
  const axis = { stroke: cssVar("--muted", "#666"), grid: { stroke: cssVar("--border", "#ddd") }, ticks: { stroke: cssVar("--border", "#ddd") } };
  const plot = new uPlot({
    width: Math.max(260, plotEl.clientWidth || 500),
    height: 220,
    // A lone step gets a range around it; sparse points are drawn (a one-step run shows).
    scales: { x: { time: false, range: (u, min, max) => (min === max ? [min - 1, max + 1] : [min, max]) } },
    series: [{ label: "step" }, ...data.runs.map((r, i) => ({ label: r.name, stroke: colour(i), width: 1.5, spanGaps: true, points: { size: 6, fill: colour(i) } }))],
    axes: [{ ...axis, incrs: STEP_INCRS, label: "training step", labelSize: 20 }, { ...axis, size: 52, label: key, labelSize: 20 }],
  }, cols, plotEl);
  plots.push(plot);
  new ResizeObserver(() => plot.setSize({ width: Math.max(260, plotEl.clientWidth), height: 220 })).observe(plotEl);
  section.dataset.ready = "1";
}

document.querySelector("[data-add-chart]")?.addEventListener("click", () => overlay(select.value));
overlay(data.default_key && data.keys.includes(data.default_key) ? data.default_key : data.keys[0]);
for (const key of data.extra_keys || []) overlay(key);
