// The home page's "Receiving now" banner follows an external run that goes quiet.
//
// Such a banner comes with the seconds until its run would be "not sending" if
// nothing more came (data-quiet-in-s, from the server's threshold,
// dashboard.reads.runs.quiet_window_s) and how often to look (data-quiet-check-ms).
// Once that time has passed the page asks the server for itself again, as the live
// rows do every few seconds (static/js/runs_list.js, whose fetch this shares), and
// shows its banner, counts and rows: the run may have sent since (its banner comes
// back with a later deadline), or no banner: the run went quiet, as a reload would say.

import { refresh } from "./runs_list.js";

let timer = 0;

export function watchBanner() {
  clearInterval(timer);
  const banner = document.querySelector("[data-live-banner][data-quiet-in-s]");
  if (!banner) return;
  const due = performance.now() + 1000 * Number(banner.dataset.quietInS);
  timer = setInterval(async () => {
    if (performance.now() < due || document.hidden) return; // a hidden tab asks later
    clearInterval(timer);
    // Shown: the fresh banner is watched anew (below). Failed: the live rows' next
    // fetch, which the banner's own row keeps going, shows it instead.
    if (await refresh()) {
      document.body.dataset.bannerChecks = String(Number(document.body.dataset.bannerChecks || 0) + 1);
    }
  }, Number(banner.dataset.quietCheckMs) || 1000);
}

// Every fresh page brings the banner's new deadline, or none.
document.addEventListener("runs:refreshed", watchBanner);
watchBanner();
