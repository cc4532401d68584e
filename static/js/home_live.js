// The home page's "Receiving now" banner follows an external run that goes quiet.
//
// Such a banner comes with the seconds until its run would be "not sending" if
// nothing more came (data-quiet-in-s, from the server's threshold,
// dashboard.reads.runs.quiet_window_s) and how often to look (data-quiet-check-ms).
// Once that time has passed the page asks the server for its banner and counts again
// and the rows' statuses (the run may have sent since: its banner comes back with a
// later deadline) and shows those, or no banner: the run went quiet, as a reload
// would say.

function swap(page, selector) {
  const fresh = page.querySelector(selector);
  const old = document.querySelector(selector);
  if (old && fresh) old.replaceWith(document.importNode(fresh, true));
  else if (old) old.remove();
  else if (fresh) document.querySelector(".page-head")?.after(document.importNode(fresh, true));
}

export function watchBanner() {
  const banner = document.querySelector("[data-live-banner][data-quiet-in-s]");
  if (!banner) return;
  const due = performance.now() + 1000 * Number(banner.dataset.quietInS);
  const timer = setInterval(async () => {
    if (performance.now() < due) return;
    clearInterval(timer);
    try {
      const r = await fetch(location.pathname + location.search, { credentials: "same-origin" });
      if (!r.ok) return;
      const page = new DOMParser().parseFromString(await r.text(), "text/html");
      swap(page, "[data-run-counts]");
      swap(page, "[data-live-banner]");
      // Each row's status too (its "not sending"); the rows stay, ticked boxes with them.
      for (const cell of page.querySelectorAll("[data-run-row] .col-status")) {
        const id = cell.closest("[data-run-row]").dataset.runRow;
        const old = document.querySelector(`[data-run-row="${CSS.escape(id)}"] .col-status`);
        if (old) old.replaceWith(document.importNode(cell, true));
      }
      document.body.dataset.bannerChecks = String(Number(document.body.dataset.bannerChecks || 0) + 1);
      watchBanner();
    } catch { /* a reload shows it */ }
  }, Number(banner.dataset.quietCheckMs) || 1000);
}

watchBanner();
