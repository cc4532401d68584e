// A repair clone's page: the statistics its parent's alert watches, charted for the
// parent and the clone with the threshold as a third line, the verdict above them
// (GET /api/runs/{id}/repair), refreshed every 3 s while the clone trains.
// Server text reaches the DOM through textContent only (util.el).

import { MetricChart } from "./chart.js";
import { el, fmt, getJSON } from "./util.js";

const section = document.getElementById("repair");
const charts = new Map();

function verdictText(data) {
  const v = data.verdict;
  const parent = data.zone.parent;
  const was = parent.steps
    ? ` The parent was in the hack's zone at ${parent.steps} steps, from step ${parent.first}.`
    : "";
  return `${v.text}${was}`;
}

// Where the hack lives: one side of the threshold, or between a floor and it.
function zoneText(stat) {
  if (stat.floor != null) {
    const [lo, hi] = [stat.floor, stat.threshold].sort((a, b) => a - b);
    return `from ${fmt(lo, 3)} to ${fmt(hi, 3)}`;
  }
  return `${stat.side === "above" ? "at or above" : "at or below"} ${fmt(stat.threshold, 3)}`;
}

function runLine(role, v, window) {
  if (!v.steps) return el("li", { "data-role": role }, el("strong", { text: role }), ": no step logged yet");
  const late = v.late_mean === null ? "—" : fmt(v.late_mean, 3);
  const crossed = v.first_hacked === null ? "never past the threshold" : `past the threshold at ${v.steps_hacked} of ${v.steps} steps (first: step ${v.first_hacked})`;
  return el("li", { "data-role": role },
    el("strong", { text: role }), `: mean of the last ${Math.min(v.steps, window)} steps ${late}; ${crossed}`);
}

function statCard(stat, data) {
  const key = stat.metric + (stat.per ? `/${stat.per}` : "");
  let card = section.querySelector(`[data-repair-stat="${CSS.escape(key)}"]`);
  if (!card) {
    card = el("section", { class: "panel chart", "data-repair-stat": key },
      el("h3", {}, el("span", { text: stat.label })),
      el("p", { class: "chart-help small muted", "data-stat-help": "" }),
      el("div", { class: "plot", "data-plot": "" }),
      el("ul", { class: "small repair-lines", "data-stat-lines": "" }));
    section.querySelector("[data-repair-stats]").append(card);
    const labels = ["parent", "clone (this run)", `threshold (hack ${zoneText(stat)})`];
    charts.set(key, new MetricChart(card.querySelector("[data-plot]"), {
      keys: ["parent", "clone", "threshold"],
      labels,
      band: false,
      name: `${stat.label}: parent and clone against the threshold`,
      yTitle: "",
    }));
  }
  const metric = stat.per ? `${stat.metric} ÷ ${stat.per}` : stat.metric;
  card.querySelector("[data-stat-help]").textContent =
    `${metric}; ${data.detector} needs it ${zoneText(stat)} (${[stat.floor_name, stat.threshold_name].filter(Boolean).join(", ")}).`;
  card.querySelector("[data-stat-lines]").replaceChildren(
    runLine("parent", stat.parent, data.window),
    runLine("clone", stat.clone, data.window));
  const steps = [...stat.parent.step, ...stat.clone.step];
  const lo = Math.min(...steps), hi = Math.max(...steps);
  const series = {
    parent: { step: stat.parent.step, last: stat.parent.value },
    clone: { step: stat.clone.step, last: stat.clone.value },
    threshold: steps.length ? { step: [lo, hi], last: [stat.threshold, stat.threshold] } : { step: [], last: [] },
  };
  const chart = charts.get(key);
  chart.load(series);
  chart.setAlerts(data.alerts.parent.map((a) => a.step));
}

async function refresh() {
  let data;
  try {
    data = await getJSON(section.dataset.repairUrl);
  } catch (err) {
    section.querySelector("[data-repair-verdict]").textContent = `Could not load the comparison (${err.message}).`;
    return;
  }
  const verdict = section.querySelector("[data-repair-verdict]");
  verdict.textContent = verdictText(data);
  verdict.dataset.state = data.verdict.state;
  verdict.className = `verdict verdict-${data.verdict.state}`;
  for (const stat of data.stats) statCard(stat, data);
  if (!data.stats.length) {
    section.querySelector("[data-repair-stats]").replaceChildren(
      el("p", { class: "muted small", text: "This detector watches no single statistic; its alerts in each run tell: " +
        `parent ${data.alerts.parent.length}, clone ${data.alerts.clone.length}.` }));
  }
  section.dataset.loaded = "1";
  if (["queued", "running"].includes(data.clone.status)) setTimeout(refresh, 3000);
}

if (section) refresh();
