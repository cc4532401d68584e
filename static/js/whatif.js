// What-if reweighting panel: posts the weights to /api/runs/{id}/whatif, draws the
// changes per step on a MetricChart and lists examples linking to the trajectories
// (the largest of each kind, saying how many of how many; "show all" asks for more);
// "clone with these weights" opens the clone form filled with the changed weights
// (/runs/{id}/clone/?weights=..., with the alert it repairs when the panel was opened
// from one: ?repair=<detector>&step=<n>, the suggested weight from
// #repair-suggestions set in its field), to review there and then launch.
// The words are whatif_text.js's. Everything from the server reaches the DOM through
// textContent (util.el).

import { MetricChart } from "./chart.js";
import { csrfToken, el, fmt, readJSONScript } from "./util.js";
import { cloneHref, exampleLabel, shownText, summary } from "./whatif_text.js";

const SERIES = ["sign_flips", "best_changes", "rank_changes", "token_flip_share"];
// Three counts (trajectories, groups) on the left axis, a 0-1 share on the right: on
// one axis the share was a flat line at 0 under counts of 24.
const CHART = {
  keys: SERIES,
  labels: ["advantage sign changes", "best rollout changes", "ranking changes", "share of tokens changing sign"],
  right: [false, false, false, true],
  yTitles: ["trajectories / groups", "share of trained tokens"],
  band: false,
};

async function postJSON(url, body) {
  const r = await fetch(url, {
    method: "POST",
    credentials: "same-origin",
    headers: { "Content-Type": "application/json", Accept: "application/json", "X-CSRFToken": csrfToken() },
    body: JSON.stringify(body),
  });
  const data = await r.json().catch(() => ({}));
  if (!r.ok) {
    const err = new Error((data.errors || [data.detail || r.statusText]).join("; "));
    err.errors = Array.isArray(data.errors) ? data.errors.map(String) : [];
    throw err;
  }
  return data;
}

// The server names a bad weight's field ("weights.outcome: must be a number from
// -1000 to 1000"): that message goes beside the field, marked invalid; the others (and
// a field the form does not have) are returned for the line under the buttons.
function showFieldErrors(form, messages) {
  for (const note of form.querySelectorAll("[data-weight-error]")) note.remove();
  for (const input of form.querySelectorAll("[data-weight][aria-invalid]")) input.removeAttribute("aria-invalid");
  const rest = [];
  for (const msg of messages) {
    const m = /^weights\.([^:]+): (.*)$/s.exec(msg);
    const input = m && form.querySelector(`[data-weight="${CSS.escape(m[1])}"]`);
    if (!input) {
      rest.push(msg);
      continue;
    }
    input.setAttribute("aria-invalid", "true");
    input.closest("label").after(el("span", { class: "errors", "data-weight-error": m[1], role: "alert", text: m[2] }));
  }
  return rest;
}

// A field's weight; null when it is blank (the server then names the field: a blank
// is no weight, not 0).
function weightOf(input) {
  return input.value.trim() === "" ? null : Number(input.value);
}

// Every component's weight; one the run does not have only when it is set, not 0.
function weights(form) {
  const out = {};
  for (const input of form.querySelectorAll("[data-weight]")) {
    const w = weightOf(input);
    if (input.hasAttribute("data-added") && !w) continue;
    out[input.dataset.weight] = w;
  }
  return out;
}

// The weights that differ from the run's: what the clone changes.
function changed(form) {
  const out = {};
  for (const input of form.querySelectorAll("[data-weight]")) {
    const w = weightOf(input);
    if (input.hasAttribute("data-added") && !w) continue; // not added (as weights())
    if (w !== Number(input.dataset.original)) out[input.dataset.weight] = w;
  }
  return out;
}

// Do the weights asked for differ from the run's own?
function differsFrom(form, sent) {
  return Object.entries(sent).some(([key, w]) => {
    const input = form.querySelector(`[data-weight="${CSS.escape(key)}"]`);
    return !input || w !== Number(input.dataset.original);
  });
}

function series(steps) {
  const out = {};
  for (const key of SERIES) out[key] = { step: steps.map((s) => s.step), last: steps.map((s) => s[key]) };
  return out;
}

function notes(report) {
  const out = [...report.unavailable];
  for (const [name, n] of Object.entries(report.added_scored || {})) {
    out.push(`${name} (not in this run) is other than 0 on ${n.toLocaleString("en")} of ${report.rollouts.toLocaleString("en")} stored rollouts`);
  }
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
          el("td", { text: exampleLabel(kind, ex) }),
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
  const cloneBtn = section.querySelector("[data-whatif-clone]"); // none: an external run
  const stale = section.querySelector("[data-whatif-stale]");
  const moreBtn = section.querySelector("[data-whatif-more]");
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
    if (cloneBtn) cloneBtn.disabled = true; // recompute first: see what the weight does
    section.scrollIntoView({ block: "start" });
    form.requestSubmit();
    return true;
  }

  // Recompute under the form's weights; ``examples``: how many of each kind of change
  // to list (null: the server's default, the largest few).
  // Only the newest request's answer is shown (an older one may come back later).
  let asked = 0;
  async function recompute(examples) {
    error.hidden = true;
    const body = { weights: weights(form), steps: null };
    if (examples) body.examples = examples;
    const mine = ++asked;
    let answer;
    try {
      answer = await postJSON(section.dataset.whatifUrl, body);
    } catch (err) {
      if (mine !== asked) return;
      const rest = err.errors?.length ? showFieldErrors(form, err.errors) : [String(err.message || err)];
      error.textContent = rest.join("; ");
      error.hidden = !rest.length;
      markStale();
      return;
    }
    if (mine !== asked) return;
    showFieldErrors(form, []);
    last = answer;
    result.hidden = false;
    section.querySelector("[data-whatif-summary]").textContent = summary(last.total, differsFrom(form, body.weights));
    section.querySelector("[data-whatif-notes]").textContent = notes(last);
    const rows = exampleRows(last);
    const table = section.querySelector("[data-whatif-examples]");
    table.tBodies[0].replaceChildren(...rows);
    table.closest(".table-wrap").hidden = !rows.length; // a header over nothing says less
    section.querySelector("[data-whatif-none]").hidden = rows.length > 0;
    const shown = shownText(last, rows.length, last.examples_limit);
    const line = section.querySelector("[data-whatif-shown]");
    line.textContent = shown.text;
    line.hidden = !shown.text;
    moreBtn.hidden = !shown.more;
    moreBtn.dataset.examples = String(shown.all);
    moreBtn.textContent = shown.more;
    if (!chart) chart = window.__whatifChart = new MetricChart(section.querySelector("[data-whatif-plot]"), CHART); // tests read it
    chart.load(series(last.steps));
    last.weights = body.weights;
    markStale();
  }

  // The figures shown are for the weights last recomputed: a weight typed since then
  // is not what they say, so the clone waits for a recompute (it would launch weights
  // nobody has seen the effect of).
  function markStale() {
    const differs = !last || JSON.stringify(weights(form)) !== JSON.stringify(last.weights);
    if (cloneBtn) cloneBtn.disabled = differs;
    stale.hidden = !last || !differs;
  }
  // A message is about the weights it was given: typing makes it out of date (the
  // browser may then refuse the form itself, and a stale message would stay).
  form.addEventListener("input", () => {
    showFieldErrors(form, []);
    error.hidden = true;
    markStale();
  });

  form.addEventListener("submit", (e) => {
    e.preventDefault();
    recompute(null);
  });
  moreBtn.addEventListener("click", () => recompute(Number(moreBtn.dataset.examples)));

  // The clone form, filled with the changed weights: reviewed there, then launched.
  cloneBtn?.addEventListener("click", () => {
    if (!last) return;
    const weightsChanged = changed(form);
    if (!Object.keys(weightsChanged).length) {
      error.textContent = "These are the run's own weights: change one to clone with it (or use Clone and edit).";
      error.hidden = false;
      return;
    }
    window.location.assign(cloneHref(section.dataset.cloneUrl, weightsChanged, repairing));
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
