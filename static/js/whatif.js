// What-if reweighting panel: posts the weights to /api/runs/{id}/whatif, draws the
// changes per step on a MetricChart and lists examples linking to the trajectories;
// "launch a clone" posts the changed weights to /api/runs/{id}/repairs (with the
// alert it repairs when the panel was opened from one: ?repair=<detector>&step=<n>,
// the suggested weight from #repair-suggestions set in its field).
// Everything from the server reaches the DOM through textContent (util.el).

import { MetricChart } from "./chart.js";
import { csrfToken, el, fmt, readJSONScript } from "./util.js";

const SERIES = ["sign_flips", "best_changes", "rank_changes", "token_flip_share"];
const KIND_LABEL = {
  sign_flip: "advantage sign changes", // to or from 0 too: its push appears or goes
  best_change: "best rollout changes",
  rank_change: "ranking changes",
  signal_change: "group signal changes",
};

async function postJSON(url, body) {
  const r = await fetch(url, {
    method: "POST",
    credentials: "same-origin",
    headers: { "Content-Type": "application/json", Accept: "application/json", "X-CSRFToken": csrfToken() },
    body: JSON.stringify(body),
  });
  const data = await r.json().catch(() => ({}));
  if (!r.ok) throw new Error((data.errors || [data.detail || r.statusText]).join("; "));
  return data;
}

// Every component's weight; one the run does not have only when it is not 0.
function weights(form) {
  const out = {};
  for (const input of form.querySelectorAll("[data-weight]")) {
    const w = Number(input.value);
    if (input.hasAttribute("data-added") && w === 0) continue;
    out[input.dataset.weight] = w;
  }
  return out;
}

// The weights that differ from the run's: what the clone changes.
function changed(form) {
  const out = {};
  for (const input of form.querySelectorAll("[data-weight]")) {
    const w = Number(input.value);
    if (w !== Number(input.dataset.original)) out[input.dataset.weight] = w;
  }
  return out;
}

function series(steps) {
  const out = {};
  for (const key of SERIES) out[key] = { step: steps.map((s) => s.step), last: steps.map((s) => s[key]) };
  return out;
}

function summary(t) {
  const parts = [];
  if (t.sign_flips !== null) {
    parts.push(`${t.sign_flips} of ${t.trajectories} trained trajectories flip advantage sign`);
    parts.push(`${fmt(100 * t.token_flip_share, 3)}% of trained tokens flip`);
  }
  parts.push(`${t.best_changes} of ${t.groups} groups change their best rollout`);
  parts.push(`mean Kendall τ ${fmt(t.tau_mean, 3)}`);
  return parts.join(" · ");
}

function notes(report) {
  const out = [...report.unavailable];
  for (const m of report.not_reweightable) out.push(`${m.component} not reweightable at ${m.steps.length} step(s): ${m.reason}`);
  for (const f of report.fixed) out.push(`${f.component}: ${f.reason}`);
  return out.join(" · ");
}

function exampleRows(report) {
  const rows = [];
  for (const [kind, list] of Object.entries(report.examples)) {
    for (const ex of list) {
      const adv = ex.old_advantage === undefined ? "" : `${fmt(ex.old_advantage, 3)} → ${fmt(ex.new_advantage, 3)}`;
      rows.push(
        el("tr", { "data-kind": kind },
          el("td", { text: KIND_LABEL[kind] || kind }),
          el("td", { text: String(ex.step) }),
          el("td", { text: String(ex.group) }),
          el("td", { text: String(ex.index) }),
          el("td", { text: `${fmt(ex.old_total, 3)} → ${fmt(ex.new_total, 3)}` }),
          el("td", { text: adv }),
          el("td", {}, el("a", { href: ex.url, text: "open" }))),
      );
    }
  }
  return rows;
}

function init(section) {
  const form = section.querySelector("[data-whatif-form]");
  const error = section.querySelector("[data-whatif-error]");
  const result = section.querySelector("[data-whatif-result]");
  const cloneBtn = section.querySelector("[data-whatif-clone]");
  const suggestions = readJSONScript("repair-suggestions") || {};
  let chart = null;
  let last = null;
  let repairing = null; // {detector, step}

  // Opened from an alert: its suggested weight in its field, the why above.
  function openRepair(detector, step) {
    const s = suggestions[detector];
    if (!s) return false;
    const input = form.querySelector(`[data-weight="${CSS.escape(s.component)}"]`);
    if (!input) return false;
    for (const i of form.querySelectorAll("[data-suggested]")) i.removeAttribute("data-suggested");
    input.value = String(s.weight);
    input.setAttribute("data-suggested", "");
    repairing = { detector, step };
    const box = section.querySelector("[data-whatif-repair]");
    box.querySelector("[data-repair-detector]").textContent = detector;
    box.querySelector("[data-repair-step]").textContent = String(step);
    box.querySelector("[data-repair-why]").textContent = `${s.component} = ${s.weight}: ${s.why}`;
    box.hidden = false;
    cloneBtn.disabled = true; // recompute first: see what the weight does
    section.scrollIntoView({ block: "start" });
    form.requestSubmit();
    return true;
  }

  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    error.hidden = true;
    try {
      last = await postJSON(section.dataset.whatifUrl, { weights: weights(form), steps: null });
    } catch (err) {
      error.textContent = String(err.message || err);
      error.hidden = false;
      return;
    }
    result.hidden = false;
    section.querySelector("[data-whatif-summary]").textContent = summary(last.total);
    section.querySelector("[data-whatif-notes]").textContent = notes(last);
    const rows = exampleRows(last);
    const table = section.querySelector("[data-whatif-examples]");
    table.tBodies[0].replaceChildren(...rows);
    table.closest(".table-wrap").hidden = !rows.length; // a header over nothing says less
    section.querySelector("[data-whatif-none]").hidden = rows.length > 0;
    if (!chart) chart = new MetricChart(section.querySelector("[data-whatif-plot]"), { keys: SERIES, band: false });
    chart.load(series(last.steps));
    cloneBtn.disabled = false;
  });

  cloneBtn.addEventListener("click", async () => {
    if (!last) return;
    error.hidden = true;
    const body = { weights: changed(form) };
    if (repairing) Object.assign(body, { detector: repairing.detector, alert_step: repairing.step });
    cloneBtn.disabled = true;
    try {
      const run = await postJSON(section.dataset.repairsUrl, body);
      window.location.assign(`/runs/${run.id}/#repair`);
    } catch (err) {
      error.textContent = String(err.message || err);
      error.hidden = false;
      cloneBtn.disabled = false;
    }
  });

  // After the listeners: opening a repair submits the form.
  const params = new URLSearchParams(window.location.search);
  if (params.get("repair")) openRepair(params.get("repair"), Number(params.get("step")));
  for (const link of document.querySelectorAll("[data-repair-open]")) {
    link.addEventListener("click", (e) => {
      if (!openRepair(link.dataset.detector, Number(link.dataset.step))) return;
      e.preventDefault();
      history.replaceState(null, "", `?repair=${encodeURIComponent(link.dataset.detector)}&step=${Number(link.dataset.step)}#whatif`);
    });
  }
}

for (const section of document.querySelectorAll("#whatif")) init(section);
