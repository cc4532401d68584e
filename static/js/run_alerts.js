// The run page's alerts: the detectors' findings (with the trajectories that made
// each fire) and the alerts the trainer itself sent, listed as they arrive; each
// alert's step is kept for the charts' dashed lines.

import { el } from "./util.js";

// An alert the trainer itself sent (trackio.alert, stored as "trackio:<title>"): its
// words under "Alerts the trainer sent", not among the detectors' findings.
const SENT_PREFIX = "trackio:";

/** The page's alert list: ``addAlert(a)`` lists one (false when it was already
 * there), ``alertSteps`` the steps listed, ``onCount(n)`` told the count. */
export function runAlerts(trajectoriesUrl, onCount) {
  const alertKeys = new Set();
  const alertSteps = [];

  function addSentAlert(a) {
    let list = document.querySelector("[data-sent-alerts]");
    if (!list) {
      const section = document.querySelector("#alerts");
      if (!section) return;
      list = el("ul", { class: "alerts-list", "data-sent-alerts": "" });
      section.append(el("h3", { text: "Alerts the trainer sent" }), list);
    }
    const title = String(a.detector).slice(SENT_PREFIX.length) || "alert";
    const link = el("a", { href: `${trajectoriesUrl}?step=${a.step}`, text: `step ${a.step}` });
    const item = el("li", { "data-sent-alert": title, "data-alert-step": String(a.step) },
      el("span", { class: `sev-${a.severity || "info"}`, text: "●" }), " ", link, " ",
      el("strong", { text: title }), " ", el("span", { class: "small muted", text: `(${a.severity || "info"})` }));
    if (a.message && a.message !== title) item.append(el("div", { class: "small", text: a.message }));
    list.append(item);
  }

  function addAlert(a) {
    const key = `${a.step}|${a.detector}`;
    if (alertKeys.has(key)) return false;
    alertKeys.add(key);
    alertSteps.push(a.step);
    if (String(a.detector).startsWith(SENT_PREFIX)) {
      if (a.message !== undefined) addSentAlert(a);
      onCount(alertKeys.size);
      return true;
    }
    const list = document.querySelector("[data-alerts]");
    if (list && a.message !== undefined) {
      const link = el("a", { href: `${trajectoriesUrl}?step=${a.step}`, text: `step ${a.step}` });
      const item = el("li", {}, el("span", { class: `sev-${a.severity || "warning"}`, text: "●" }), " ", link, " ",
        el("strong", { text: a.detector }), " ", el("span", { class: "muted", text: a.message || "" }));
      // The trajectories that made it fire (stored with the alert's step: the recording
      // policy keeps the groups an alert points at).
      const box = evidenceBox(a, trajectoriesUrl);
      if (box) item.append(box);
      list.append(item);
    }
    document.querySelector("[data-no-alerts]")?.setAttribute("hidden", "");
    const noSignal = document.querySelector("[data-no-signal]");
    if (noSignal && a.detector === "no_learning_signal" && noSignal.hidden) {
      // The banner names it: the message's own "no learning signal: " is left out.
      noSignal.querySelector("[data-no-signal-text]").textContent =
        (a.message || "").replace(/^no learning signal:\s*/i, "");
      noSignal.hidden = false;
    }
    onCount(alertKeys.size);
    return true;
  }

  return { addAlert, alertSteps };
}

const NUMBER = /-?\d+(?:\.\d+)?/g;

/** Reasons of one shape as one, each number the range of its values (evidence.py's
 * _ranged): "2–3 tokens (0.4–0.6x the early mean), not solved". */
export function ranged(reasons) {
  const slots = reasons.map((r) => r.match(NUMBER) || []);
  const parts = reasons[0].split(/-?\d+(?:\.\d+)?/);
  let out = parts[0];
  for (let i = 1; i < parts.length; i++) {
    const seen = [...new Set(slots.map((s) => s[i - 1]))]
      .sort((a, b) => parseFloat(a) - parseFloat(b) || (a < b ? -1 : a > b ? 1 : 0));
    out += (seen.length === 1 ? seen[0] : `${seen[0]}\u2013${seen[seen.length - 1]}`) + parts[i];
  }
  return out;
}

/** An alert's evidence rollouts under each reason, once, a group's rollouts together
 * ("2 tokens (0.4x the early mean), not solved: group 1 #0, #2; group 3 #1"), as
 * templates/pages/partials/alert_evidence.html writes them (dashboard.reads.evidence.
 * by_reason); null without rollouts. */
function evidenceBox(a, trajectoriesUrl) {
  const refs = Array.isArray(a.trajectories) ? a.trajectories : [];
  if (!refs.length) return null;
  // Reasons alike but for their numbers share a line (dashboard.reads.evidence).
  const shapes = new Map();
  for (const t of refs) {
    const shape = String(t.why || "").replace(NUMBER, "#");
    if (!shapes.has(shape)) shapes.set(shape, []);
    shapes.get(shape).push(t);
  }
  const reasons = new Map();
  for (const alike of shapes.values()) {
    const groups = new Map();
    for (const t of alike) {
      if (!groups.has(t.group)) groups.set(t.group, []);
      groups.get(t.group).push(t);
    }
    reasons.set(ranged(alike.map((t) => String(t.why || ""))), groups);
  }
  const n = refs.length;
  const box = el("div", { class: "small alert-evidence", "data-alert-evidence": a.detector },
    `Evidence: ${n} rollout${n === 1 ? "" : "s"} of step ${a.step} show${n === 1 ? "s" : ""} it`);
  const matched = Number(a.evidence?.trajectories_matched);
  if (matched > n) box.append(" ", el("span", { class: "muted", text: `(${matched} matched in all; the first ${n} named)` }));
  const list = el("ul", { class: "evidence-reasons" });
  for (const [why, groups] of reasons) {
    const item = el("li", { "data-evidence-reason": "" },
      why ? el("span", { "data-evidence-why": "", text: why }) : el("span", { class: "muted", text: "no reason given" }));
    const count = [...groups.values()].reduce((s, g) => s + g.length, 0);
    if (count > 1) item.append(" ", el("span", { class: "muted", text: `(${count})` }));
    item.append(": ");
    [...groups.values()].forEach((g, gi) => {
      if (gi) item.append("; ");
      g.forEach((t, i) => {
        if (i) item.append(", ");
        const href = `${trajectoriesUrl}${a.step}/${Number(t.group)}/${Number(t.index)}/`;
        const text = `${i ? "" : `group ${t.group} `}#${t.index}`;
        item.append(el("a", { href, "data-evidence-link": "", title: t.why || `group ${t.group} #${t.index}`, text }));
      });
    });
    list.append(item);
  }
  box.append(" ", list);
  return box;
}
