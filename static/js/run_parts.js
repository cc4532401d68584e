// The parts of the run page that the server renders from what it stores and no frame
// carries (templates/pages/detail.html): a queued run's place in line with the runs
// ahead ("open that run"), the note on why it waits or how it ended (a demo paused
// for a user's run, a retry after a lost worker), the attempt number and the
// Attempts table, the Model button and box, the Pause / Resume / Cancel controls, and the
// line on what an external run sent. When one of them may have changed (the status
// did, a checkpoint was kept, an external run sent a new metric), the page asks for
// itself again and takes those parts from the answer, so that the live page shows
// what a reload would. The new nodes are the server's own, parsed and imported, never
// HTML assembled here. A part that holds the page's own state (the charts: their
// points, zoom, log boxes) is not replaced whole: its owner takes what changed from
// the fresh page (takePartWith; static/js/run_charts_live.js).

export const STATUS_PARTS = [
  "[data-run-state]", "[data-run-error]", "[data-model-link]", "[data-model]", "[data-stat-attempt]", "[data-attempts]",
  "[data-run-controls]",
];
export const MODEL_PARTS = ["[data-model-link]", "[data-model]"];
export const SENT_PARTS = ["[data-recording]"];

// Where a part goes when the page has none yet (a reload renders it only when it has
// something to say); a part the fresh page lacks is removed.
const PLACE = {
  "[data-run-error]": (node) => document.querySelector("[data-run-state]")?.after(node),
  "[data-model-link]": (node) => document.querySelector(".page-head .actions .export-menu")?.before(node),
  "[data-recording]": (node) => document.querySelector(".page-head > div")?.append(node),
};

// [data-run-state] stays the same node (the page updates its text as polls and
// frames arrive): its children and whether it shows are taken over.
function takeState(old, fresh) {
  old.replaceChildren(...[...fresh.childNodes].map((n) => document.importNode(n, true)));
  old.hidden = fresh.hidden;
}

const TAKERS = {};

/** ``selector`` taken from the fresh page by ``fn(page)`` instead of replaced. */
export function takePartWith(selector, fn) {
  TAKERS[selector] = fn;
}

function take(page, selector) {
  if (TAKERS[selector]) { TAKERS[selector](page); return; }
  const old = document.querySelector(selector);
  const fresh = page.querySelector(selector);
  if (selector === "[data-run-state]") {
    if (old && fresh) takeState(old, fresh);
    return;
  }
  if (!fresh) { old?.remove(); return; }
  const node = document.importNode(fresh, true);
  if (old) old.replaceWith(node);
  else PLACE[selector]?.(node);
}

let wanted = new Set();
let timer = 0;
let asked = 0; // the newest request: an older one answered after it is asked again
let loading = 0; // requests asked for and not answered yet

/** Is a request for the parts asked for or on its way? */
export const partsPending = () => loading > 0;

/** Take `selectors` from the page as the server renders it now (after a short pause,
 * so that parts asked for together come in one request). */
// A burst of reasons (a status change with a checkpoint and new keys) is one request:
// the first schedules it, later ones add their parts; requests come at most every
// MIN_GAP_MS.
const MIN_GAP_MS = 2000;
let lastLoad = -Infinity;

export function refreshParts(selectors) {
  for (const s of selectors) wanted.add(s);
  if (timer) return;
  loading += 1;
  timer = setTimeout(load, Math.max(150, lastLoad + MIN_GAP_MS - performance.now()));
}

// A kept checkpoint: the Model box once it has one to show, then at most every
// MODEL_EVERY_MS for the newer ones (a run that keeps one every step would ask for
// its page every step).
const MODEL_EVERY_MS = 30000;
let lastModel = -Infinity;

export function refreshModel() {
  const none = document.querySelector("[data-model] [data-model-none]");
  if (!none && performance.now() - lastModel < MODEL_EVERY_MS) return;
  lastModel = performance.now();
  refreshParts(MODEL_PARTS);
}

async function load() {
  timer = 0;
  lastLoad = performance.now();
  const selectors = [...wanted];
  wanted = new Set();
  const mine = ++asked;
  try {
    const r = await fetch(location.pathname, { credentials: "same-origin" });
    if (!r.ok) return;
    const page = new DOMParser().parseFromString(await r.text(), "text/html");
    if (mine !== asked) { refreshParts(selectors); return; } // a newer one is on its way
    for (const s of selectors) take(page, s);
  } catch { /* a reload shows them */ } finally {
    loading -= 1;
  }
}

/** Do the runs ahead that the page links to differ from `ahead` (the run API's
 * `waiting.ahead`)? Then its place in line is taken again. */
export function aheadChanged(ahead) {
  const shown = [...document.querySelectorAll("[data-run-ahead] a")]
    .map((a) => a.getAttribute("href").split("/").filter(Boolean).pop());
  const now = (ahead || []).map((a) => String(a.id));
  // One run ahead is linked as "open that run"; several by name.
  return shown.join() !== now.join();
}
