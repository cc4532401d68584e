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
      const refs = Array.isArray(a.trajectories) ? a.trajectories : [];
      if (refs.length) {
        const box = el("div", { class: "small", "data-alert-evidence": a.detector }, "evidence:");
        refs.forEach((t, i) => {
          const href = `${trajectoriesUrl}${a.step}/${Number(t.group)}/${Number(t.index)}/`;
          box.append(" ", el("a", { href, "data-evidence-link": "", title: t.why || "", text: `group ${t.group} #${t.index}` }));
          // A reason once, after the last of the neighbours sharing it (pages_tags.why_once).
          const next = i + 1 < refs.length ? refs[i + 1].why || "" : null;
          if (t.why && t.why !== next) box.append(" ", el("span", { class: "muted", text: `(${t.why})` }));
          if (i < refs.length - 1) box.append(",");
        });
        item.append(box);
      }
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
