// Following what is live on a page by asking the server for it again: the runs list
// and home (runs_list.js), compare's summary (compare_live.js). While `isLive()` says
// so, `load()` (a promise of whether it showed the answer; it never rejects) runs
// every `every()` ms: one request at a time (a call while one is under way shares
// it), none while the tab is hidden (the next waits for its return), slower after
// each failure (up to MAX_BACKOFF intervals apart), none once nothing is live.
// `flag`: the body's data attribute that says whether it is following ("on"/"off").

const MAX_BACKOFF = 16;

export function livePoller({ isLive, every, load, flag }) {
  let failures = 0;
  let timer = 0;
  let inFlight = null;

  /** Ask now; resolves to whether the answer was shown. */
  function refresh() {
    if (!inFlight) {
      inFlight = load()
        .then((shown) => {
          failures = shown ? 0 : failures + 1; // a reload shows it; the next try waits longer
          return shown;
        })
        .finally(() => {
          inFlight = null;
          schedule();
        });
    }
    return inFlight;
  }

  /** The next look, if anything is live. */
  function schedule() {
    clearTimeout(timer);
    const live = isLive();
    document.body.dataset[flag] = live ? "on" : "off";
    if (!live) return;
    timer = setTimeout(() => {
      if (document.hidden) document.addEventListener("visibilitychange", () => refresh(), { once: true });
      else refresh();
    }, every() * Math.min(MAX_BACKOFF, 2 ** failures));
  }

  return { refresh, schedule };
}
