// What the run page says before step 1 (dashboard/pages/views.py warm_line and
// dashboard/pages/run_state.py stopped_before_step_1 say the same server side): the
// warm start's progress, and why the charts are empty while the run waits, warms up,
// or ended before its first RL step.

import { FINAL } from "./live.js";

const steps = (n) => `${n} step${n === 1 ? "" : "s"}`;

/** The "Before step 1:" notice: the warm start's progress (`warm`: {done, of}), else
 * that it starts (`planned`: the config's warm-start steps), else nothing. */
export function warmText(warm, planned) {
  if (warm && warm.of) {
    return `warm start: ${warm.done} of ${steps(warm.of)} (teaching the model the action format before RL; the charts start at step 1)`;
  }
  return planned ? `warm start: starting (${steps(planned)} before step 1)` : "";
}

// Empty charts say why while the run waits (queued, warming up) instead of "No data
// yet." for minutes, and where a run that ended in its warm start stopped; a chart
// whose emptiness has its own reason (no KL term) keeps it.
export function waitingChartText(status, warm, lastStep) {
  if (status === "queued") {
    return lastStep
      ? `Queued after step ${lastStep}: nothing recorded here yet; the run goes on when it starts again.`
      : "Queued: charts begin at step 1, once the run starts.";
  }
  if (status === "running" && !lastStep) {
    return warm && warm.of
      ? `Warm start ${warm.done} of ${warm.of}: charts begin at step 1.`
      : "Starting: charts begin at step 1.";
  }
  if (FINAL.has(status) && !lastStep && warm && warm.of) {
    return `Stopped at warm start ${warm.done || 0} of ${warm.of} (${status}): no RL step ran, so nothing was charted.`;
  }
  if (FINAL.has(status) && !lastStep && status !== "succeeded") {
    return `Stopped before step 1 (${status}): no RL step ran, so nothing was charted.`;
  }
  return null;
}

/**
 * The empty charts' placeholders, and in place of the whole grid while the run has
 * no metric at all (`hasMetrics` false) one notice saying why (a dozen cards saying
 * it each read as a dozen problems): what a reload shows (dashboard/pages/
 * run_state.py charts_waiting). The charts stay in the page, hidden, and come back
 * with the first step.
 */
export function updateChartPlaceholders(status, warm, lastStep, hasMetrics = true) {
  const text = waitingChartText(status, warm, lastStep);
  for (const p of document.querySelectorAll("[data-chart] [data-nodata]")) {
    if (p.dataset.initial === undefined) p.dataset.initial = p.textContent;
    if (p.dataset.initial !== "No data yet.") continue;
    p.dataset.waiting = text || "";
    if (p.dataset.loading === undefined) p.textContent = text || p.dataset.initial;
  }
  const why = text && !hasMetrics ? text : "";
  const notice = document.querySelector("[data-charts-waiting]");
  if (notice) {
    if (why && notice.textContent !== why) notice.textContent = why;
    notice.hidden = !why;
  }
  for (const part of document.querySelectorAll("[data-charts], [data-chart-tools]")) {
    if (part.hidden !== !!why) part.hidden = !!why;
  }
}

// While a chart's first series is on its way it says so: "No data yet." there read
// as a run that had logged nothing (a finished run's charts said it for a second).
export function chartLoading(section, loading) {
  const p = section.querySelector("[data-nodata]");
  if (!p) return;
  if (p.dataset.initial === undefined) p.dataset.initial = p.textContent;
  if (loading) {
    p.dataset.loading = "";
    p.textContent = "Loading…";
  } else if (p.dataset.loading !== undefined) {
    delete p.dataset.loading;
    p.textContent = p.dataset.waiting || p.dataset.initial;
  }
}
