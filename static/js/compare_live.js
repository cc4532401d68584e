// Compare follows its live runs. While a summary row's run is queued, training or
// receiving events (the server marks that row data-live-row), the page asks for its
// summary again (?part=summary, the server's own table, parsed and imported: no HTML
// assembled here) every data-live-every-ms and shows it; then it tells compare.js
// which runs were live ("compare:refreshed"), whose lines are read again. One request
// at a time, none while the tab is hidden, slower after each failure, and none once
// no row is live (live_poll.js): the last refresh shows the run's end (its final
// step and status).

import { livePoller } from "./live_poll.js";

const summary = () => document.querySelector("[data-compare-summary]");
const liveIds = () => [...(summary()?.querySelectorAll("[data-live-row]") || [])].map((r) => r.dataset.runRow);

function bump(name) {
  document.body.dataset[name] = String(Number(document.body.dataset[name] || 0) + 1);
}

function every() {
  const ms = Number(summary()?.dataset.liveEveryMs);
  return ms > 0 ? ms : 5000;
}

async function load() {
  const before = liveIds();
  try {
    const url = new URL(window.location.href);
    url.searchParams.set("part", "summary");
    const r = await fetch(url, { credentials: "same-origin" });
    if (!r.ok || r.redirected) throw new Error(`HTTP ${r.status}`); // signed out: the login page
    const page = new DOMParser().parseFromString(await r.text(), "text/html");
    const fresh = page.querySelector("[data-compare-summary]");
    if (!fresh) throw new Error("no summary");
    const old = summary();
    const changed = !old.isEqualNode(fresh);
    if (changed) old.replaceWith(document.importNode(fresh, true));
    bump("comparePolls");
    // The runs live before or now (one that just ended shows its last steps too),
    // when a row moved: a run still queued has no new line to read.
    const runs = [...new Set([...before, ...liveIds()])];
    if (changed) document.dispatchEvent(new CustomEvent("compare:refreshed", { detail: { runs } }));
    return true;
  } catch {
    return false;
  }
}

livePoller({ isLive: () => liveIds().length > 0, every, load, flag: "compareLive" }).schedule();
