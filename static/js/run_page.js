// The run page: charts loaded from the metrics API (downsampled server side), kept
// live by the websocket (RunStream), alerts listed and marked on every chart, the
// advantage histogram of a step, and a click on any chart opening that step's
// trajectories.

import { MetricChart, fetchSeries } from "./chart.js";
import { ChartGroup, chartTools, logToggle } from "./chart_view.js";
import { drawHistogram, histogram } from "./histogram.js";
import { FINAL, RunStream } from "./live.js";
import { liveCharts } from "./run_charts_live.js";
import { SENT_PARTS, STATUS_PARTS, aheadChanged, partsPending, refreshModel, refreshParts } from "./run_parts.js";
import { runAlerts } from "./run_alerts.js";
import { RunClock, isEvent, since } from "./run_time.js";
import { chartLoading, updateChartPlaceholders, warmText } from "./run_waiting.js";
import { el, fmt, getJSON, num, readJSONScript } from "./util.js";

const data = readJSONScript("page-data");
const charts = [];
// One view over the page's charts: smoothing, cursor, zoom (chart_view.js).
const view = new ChartGroup("run-charts", "run");
chartTools(document.querySelector("[data-chart-tools]"), view);
window.__chartView = view; // tests read it
const trajSteps = new Set(data.trajectory_steps || []);
let histStep = data.latest_trajectory_step;
const strip = { ...(data.stats || {}) }; // best_reward, best_step, last_step, duration_s
const pointsWanted = () => Math.min(2000, Math.max(200, Math.round(window.innerWidth)));

// A step without stored trajectories (the recording policy keeps every n-th step)
// opens the nearest one that has them; the page itself falls back the same way.
function nearestRecorded(step) {
  let best = null;
  for (const s of trajSteps) {
    const d = Math.abs(s - step);
    if (best === null || d < Math.abs(best - step) || (d === Math.abs(best - step) && s < best)) best = s;
  }
  return best === null ? step : best;
}

function openStep(step) {
  window.location.href = `${data.trajectories_url}?step=${nearestRecorded(Math.round(step))}`;
}

function makeChart(section, spec, logId = spec.id) {
  const plot = section.querySelector("[data-plot]");
  const nodata = section.querySelector("[data-nodata]");
  const keys = spec.keys;
  const chart = new MetricChart(plot, {
    keys,
    labels: keys,
    name: spec.help ? `${spec.title}: ${spec.help}` : spec.title,
    xTitle: spec.x_title,
    yTitle: spec.y_title,
    readout: section.querySelector("[data-readout]"),
    onPick: openStep,
    group: view,
    onData: (n) => {
      if (nodata) nodata.hidden = n > 0;
      section.dataset.points = String(n);
      if (n > 0 && !document.body.dataset.firstChartMs) {
        document.body.dataset.firstChartMs = String(Math.round(performance.now())); // since navigation
      }
    },
  });
  chart.section = section;
  chart.spec = spec;
  chart.setAlerts(alertSteps);
  const heading = section.querySelector("h3");
  heading.querySelector(".log-toggle")?.remove(); // the "any metric" chart made again
  logToggle(heading, chart, logId, view, spec.title);
  return chart;
}

const { addAlert, alertSteps } = runAlerts(data.trajectories_url, (n) => {
  setStat("alerts", String(n));
  const label = document.querySelector("[data-stat-label=alerts]");
  if (label) label.textContent = n === 1 ? "alert" : "alerts";
});
for (const a of data.alerts) addAlert(a);

for (const spec of data.charts) {
  const section = document.querySelector(`[data-chart="${CSS.escape(spec.id)}"]`);
  if (section) charts.push(makeChart(section, spec));
}

// One request per chart, two at a time, in page order: the reward chart shows up
// first instead of every chart waiting for the slowest series.
async function loadCharts(list = charts) {
  const t0 = performance.now();
  const queue = [...list];
  const points = pointsWanted();
  const first = list.filter((c) => !c.size && c.section);
  if (data.last_step) for (const c of first) chartLoading(c.section, true); // steps to read
  const worker = async () => {
    while (queue.length) {
      const chart = queue.shift();
      try {
        const { series, bucketWidth } = await fetchSeries(data.metrics_url, chart.keys, points);
        chart.load(series, bucketWidth);
      } finally {
        if (chart.section) chartLoading(chart.section, false);
      }
    }
  };
  await Promise.all([worker(), worker()]);
  document.body.dataset.chartsMs = String(Math.round(performance.now() - t0));
}

// --- the stats strip ------------------------------------------------------------------------
function setStat(name, text) {
  const node = document.querySelector(`[data-stat=${name}]`);
  if (node && node.textContent !== text) node.textContent = text;
}

// The latest reward as the server's `latest` filter writes it: NaN/±∞ marked, with
// the same tooltip (dashboard/pages/templatetags/pages_tags.py NOT_A_NUMBER).
function setLatest(r) {
  const node = document.querySelector("[data-stat=last_reward]");
  if (!node) return;
  const text = fmt(r);
  if (Number.isFinite(r)) {
    if (node.textContent !== text) node.textContent = text;
    return;
  }
  const sign = Number.isNaN(r) ? "" : r > 0 ? " (+∞)" : " (−∞)";
  node.replaceChildren(el("span", {
    class: "not-a-number", title: `the last logged value is not a number${sign}`,
    "data-not-a-number": "", text,
  }));
}

/** Latest and best reward (with its step) from one more step of the stream. */
function updateStrip(step, r) {
  if (r === null) return;
  if (strip.last_step === undefined || step >= strip.last_step) {
    strip.last_step = step;
    setLatest(r);
  }
  if (!Number.isFinite(r)) return; // the best counts numbers only, as the server's
  // Ties keep the earlier step, as the server's best does.
  const better = strip.best_reward === null || strip.best_reward === undefined || r > strip.best_reward ||
    (r === strip.best_reward && step < strip.best_step);
  if (better) {
    strip.best_reward = r;
    strip.best_step = step;
    setStat("best_reward", fmt(r));
    setStat("best_step", ` (step ${step})`);
  }
}

// The wall time (dashboard.reads.runs.duration_s, kept current) and whether an
// external run still sends (static/js/run_time.js): looked at every
// data-quiet-check-ms, switching "live" and "not sending" both ways without a reload.
const liveState = document.querySelector("[data-live-state]");
const clock = new RunClock(data.clock || {}, data.status);
// A page rendered after the end has the server's wall time already (settleWall).
if (FINAL.has(data.status)) document.body.dataset.wallSettled = "1";
let sending = !clock.notSending();
function tickClock() {
  setStat("duration", clock.wallText());
  const age = clock.eventAge();
  const last = document.querySelector("[data-last-event]");
  if (last && age !== null && last.textContent !== since(age)) last.textContent = since(age);
  const created = document.querySelector("[data-created-ago]"), old = clock.createdAge();
  if (created && old !== null && created.textContent !== since(old)) created.textContent = since(old);
  if (sending === clock.notSending()) {
    sending = !sending;
    setLive(document.body.dataset.live || "live");
  }
}
setInterval(tickClock, Number(liveState?.dataset.quietCheckMs) || 1000);

// --- status ------------------------------------------------------------------------------
// Cancel asks first; the question says what cancelling does now, following the live
// status both ways (the page renders it for the status it was opened in: a run that
// went from running back to queued was still asked to stop "at its next step"). The
// wording is the page's own (templates/pages/detail.html), as the server's message
// after a cancel is ("Cancelled before it started" for a queued run).
const CANCEL_QUESTIONS = {
  queued: "Cancel this queued run? It will not start.",
  running: "Stop this run at its next step? What it recorded so far is kept.",
  paused: "Cancel this paused run? It will not go on; what it recorded is kept.",
};

function updateCancelQuestion(status) {
  const question = document.querySelector("[data-cancel-question]");
  // A run queued again after its steps (a paused demo) has started: it will not go on.
  const text = status === "queued" && data.last_step
    ? `Cancel this run? It is queued after step ${data.last_step} and will not go on; what it recorded is kept.`
    : CANCEL_QUESTIONS[status];
  if (question && text && question.textContent !== text) question.textContent = text;
}

function setStatus(status, lastStep) {
  if (typeof lastStep === "number") data.last_step = lastStep; // the cancel question reads it
  if (status) {
    const badge = document.querySelector("[data-run-status] .badge");
    if (badge && badge.textContent !== status) {
      badge.textContent = status;
      badge.className = `badge st-${status}`;
    }
    const menu = document.querySelector("[data-cancel-menu]");
    if (menu && FINAL.has(status)) { menu.open = false; menu.hidden = true; }
    updateCancelQuestion(status);
    clock.setStatus(status);
    const ended = FINAL.has(status) && !FINAL.has(data.status);
    const stopped = data.status === "running" && status !== "running"; // ended or paused
    const changed = status !== data.status;
    data.status = status;
    if (changed) {
      setLive(document.body.dataset.live || "live"); // "up to date", not "live"
      // What a reload would show for the new status: the runs ahead of a run queued
      // again, its note (paused, retried), the model it kept at the stop or the end.
      refreshParts(STATUS_PARTS);
    }
    if (ended) {
      // "Cancel requested: the run stops at its next step." has happened.
      document.querySelectorAll(".messages .cancel-pending").forEach((li) => { li.hidden = true; });
    }
    if (changed && status !== "running") {
      // "Pause requested: the run stops at its next step..." has happened (or it ended).
      document.querySelectorAll(".messages .pause-pending").forEach((li) => { li.hidden = true; });
    }
    if (stopped) settleWall();
  }
  if (typeof lastStep === "number") {
    const ls = document.querySelector("[data-last-step]");
    if (ls) ls.textContent = String(lastStep);
    const prog = document.querySelector("[data-progress]");
    if (prog) prog.value = lastStep;
  }
}

/** The wall time of a run that ended, or was paused back into the queue, while
 * the page was open: the server's (what a reload shows). */
async function settleWall() {
  if (data.clock?.external) return;
  try {
    const run = await getJSON(data.run_api);
    if (run.status === "running" || typeof run.duration_s !== "number") return;
    if (!clock.settle(run.duration_s)) return;
    setStat("duration", clock.wallText());
    if (FINAL.has(run.status)) document.body.dataset.wallSettled = "1";
  } catch { /* a reload shows it */ }
}

function setLive(state) {
  const dot = document.querySelector("[data-live-dot]");
  const text = document.querySelector("[data-live-text]");
  const finished = FINAL.has(data.status);
  // Green only while the run trains and its updates arrive; a queued (or paused) run
  // is connected, not live.
  // An external run whose client went quiet: "not sending", whatever the socket says.
  const quiet = clock.notSending();
  // A queued run that has trained (a paused demo, a retry after a lost worker) waits
  // to go on, not to start.
  const waiting = data.last_step ? `connected; queued again after step ${data.last_step}` : "connected; not training yet";
  const connected = finished
    ? "up to date"
    : data.status === "queued" ? waiting : data.status === "paused" ? "connected; paused" : "live";
  dot?.classList.toggle("on", state === "live" && data.status === "running" && !quiet);
  dot?.classList.toggle("retry", state === "retry");
  if (text) {
    const said = {
      live: quiet ? "not sending" : connected, connecting: quiet ? "not sending" : "connecting…",
      retry: "reconnecting…", refused: "not allowed",
    }[state] || state;
    if (text.textContent !== said) text.textContent = said;
  }
  if (liveState && data.clock?.external) {
    liveState.dataset.sending = quiet ? "no" : "yes";
    liveState.title = quiet
      ? "no events for longer than the server's threshold; it shows as lost once silent for longer than its EXTERNAL_RUN_TIMEOUT"
      : "live updates";
  }
  document.body.dataset.live = state;
}

// --- before step 1: the queue, then the warm start ---------------------------------------
// A queued run says where it stands in line (polled from the run's API while it
// waits: the runs ahead do not stream to this page); a running one before step 1
// says how far its warm start is (the `warmup` of its frames).
const stateBox = document.querySelector("[data-run-state]");
function showState(label, text) {
  if (!stateBox) return;
  stateBox.hidden = !text;
  stateBox.querySelector("[data-run-state-label]").textContent = label;
  stateBox.querySelector("[data-run-state-text]").textContent = text || "";
  if (label !== "Queued:") stateBox.querySelector("[data-run-ahead]")?.remove();
}

// Whether the run has any metric (the "any metric" picker lists them, the server's
// and each new one a frame brings): without one the charts give way to one notice.
function hasMetrics() {
  return (!!pick && [...pick.options].some((o) => o.value)) || charts.some((c) => c.size > 0);
}

function showCharts() {
  updateChartPlaceholders(data.status, data.warmup, data.last_step, hasMetrics());
}

function updateState(status, lastStep, warm) {
  if (warm) data.warmup = warm;
  if (typeof lastStep === "number") data.last_step = lastStep;
  updateChartPlaceholders(status, data.warmup, data.last_step, hasMetrics());
  if (status === "queued") return; // the poll below says where it stands
  if (status === "running" && !data.last_step) showState("Before step 1:", warmText(data.warmup, data.warmstart_steps));
  else showState("", "");
}

async function pollWaiting() {
  if (data.status !== "queued") return;
  try {
    const run = await getJSON(data.run_api);
    if (run.status === "queued" && run.waiting) {
      showState("Queued:", run.waiting.text);
      // The runs ahead moved on: the links to them are the server's again.
      if (!partsPending() && aheadChanged(run.waiting.ahead)) refreshParts(["[data-run-state]"]);
    } else setStatus(run.status, run.last_step);
    updateState(run.status, run.last_step, run.warmup);
  } catch { /* the next poll tries again */ }
  if (data.status === "queued") setTimeout(pollWaiting, 3000);
}
setTimeout(pollWaiting, 3000);
// "Pause requested": the run paused (or ended) before this page was rendered.
if (data.status !== "running") {
  document.querySelectorAll(".messages .pause-pending").forEach((li) => { li.hidden = true; });
}
// The run stopped between the cancel and this page (the redirect after it): the
// request has happened, so "Cancel requested: the run stops at its next step." goes.
if (FINAL.has(data.status)) {
  document.querySelectorAll(".messages .cancel-pending").forEach((li) => { li.hidden = true; });
}

// --- histogram ---------------------------------------------------------------------------
async function showHistogram(step) {
  if (step === null || step === undefined) return;
  histStep = step;
  const body = await getJSON(`${data.trajectories_api}?step=${step}&limit=2000`);
  const values = (body.trajectories || []).filter((t) => !t.dropped).map((t) => t.advantage);
  const h = histogram(values);
  document.querySelector("[data-hist-step]").textContent = String(step);
  document.querySelector("[data-hist-empty]").hidden = !!h;
  drawHistogram(document.querySelector("[data-hist-canvas]"), h);
}

function neighbour(delta) {
  const steps = [...trajSteps].sort((a, b) => a - b);
  const i = steps.indexOf(histStep);
  const j = i < 0 ? steps.length - 1 : i + delta;
  return steps[Math.max(0, Math.min(steps.length - 1, j))];
}
document.querySelector("[data-hist-prev]")?.addEventListener("click", () => showHistogram(neighbour(-1)));
document.querySelector("[data-hist-next]")?.addEventListener("click", () => showHistogram(neighbour(1)));

// --- any metric --------------------------------------------------------------------------
const custom = document.querySelector("[data-custom-chart]");
const pick = document.querySelector("[data-metric-pick]");
let customChart = null;
showCharts(); // the placeholders (and the notice in place of the charts) for the status
pick?.addEventListener("change", async () => {
  if (!pick.value) return;
  if (customChart) {
    customChart.destroy(); // a load still on its way draws nothing
    charts.splice(charts.indexOf(customChart), 1);
  }
  customChart = makeChart(custom, { keys: [pick.value], title: `Any metric: ${pick.value}`, y_title: pick.value }, `metric:${pick.value}`);
  charts.push(customChart);
  await loadCharts([customChart]);
});

// --- frames ------------------------------------------------------------------------------
const live = liveCharts({ data, charts, makeChart, loadCharts, view, onTaken: showCharts }); // names sent later
let histTimer = null;
function onFrame(frame) {
  if (isEvent(frame)) { clock.heard(); tickClock(); } // an external run's client sends again
  const wasQueued = data.status === "queued";
  setStatus(frame.status, frame.last_step);
  updateState(frame.status, frame.last_step, frame.warmup);
  if (!wasQueued && data.status === "queued") setTimeout(pollWaiting, 1000); // paused
  for (const s of frame.steps || []) {
    for (const c of charts) c.add(s.step, s.metrics);
    live.step(s);
    updateStrip(s.step, num(s.metrics[data.reward_key || "reward"])); // train/reward...
    const known = pick && new Set([...pick.options].map((o) => o.value));
    for (const key of Object.keys(s.metrics)) {
      if (known && !known.has(key)) {
        pick.append(el("option", { value: key, text: key }));
        known.add(key);
        live.newNames(); // and "Sent: N metrics" of an external run
      }
    }
  }
  if (frame.steps?.length) showCharts(); // the first step: the charts come back
  if (frame.checkpoints?.length) refreshModel(); // the Model button and box
  let newAlert = false;
  for (const a of frame.alerts || []) newAlert = addAlert(a) || newAlert;
  if (newAlert) for (const c of charts) c.setAlerts(alertSteps);
  let latest = null;
  // An external run's first trajectories: its line says no longer "no trajectories".
  if (data.clock?.external && !trajSteps.size && frame.trajectories?.length) refreshParts(SENT_PARTS);
  for (const t of frame.trajectories || []) {
    trajSteps.add(t.step);
    latest = Math.max(latest ?? t.step, t.step);
  }
  if (latest !== null && (histStep === null || histStep === undefined || latest > histStep)) {
    clearTimeout(histTimer);
    histTimer = setTimeout(() => showHistogram(latest), 300);
  }
  // Live points are raw steps; past a few thousand, reload the downsampled series.
  if (charts.some((c) => c.size > 4000)) loadCharts();
  document.body.dataset.frames = String(stream.stats.frames);
  document.body.dataset.streamStep = String(stream.lastStep);
}

const stream = new RunStream({
  wsPath: data.ws_path,
  backfillUrl: data.backfill_url,
  lastStep: data.last_step,
  seq: data.frame_seq,
  status: data.status,
  onFrame,
  onState: setLive,
});
window.__runStream = stream; // for tests and debugging: stats, forced reconnects
window.__runCharts = charts; // for tests: each chart's uPlot (scales, axis labels)

loadCharts()
  .catch((err) => { document.body.dataset.chartsError = String(err); })
  .finally(() => {
    document.body.dataset.chartsReady = "1";
    stream.start();
  });
showHistogram(histStep).catch(() => {});
