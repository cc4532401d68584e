// Runs list and home: tick runs to compare (2 to 8), then open /compare/?runs=a,b.
//
// While a row's run is queued, training or receiving events (the server marks that
// row data-live-row), the page fetches itself again every data-live-every-ms (set on
// .page-head) and shows the fresh counts, banner and rows in place: one request at a
// time, none while the tab is hidden, slower after each failure, and no more once no
// row is live. The new nodes are the server's own, parsed and imported, never HTML
// assembled here; the compare boxes keep their ticks and the focused row its focus
// (the asking: live_poll.js).

import { livePoller } from "./live_poll.js";

const boxes = () => [...document.querySelectorAll("[data-compare-box]")];
const button = document.querySelector("[data-compare-button]");
const count = document.querySelector("[data-compare-count]");
const form = document.getElementById("compare-form");

function update() {
  const chosen = boxes().filter((b) => b.checked);
  if (count) count.textContent = String(chosen.length);
  if (button) button.disabled = chosen.length < 2 || chosen.length > 8;
  for (const b of boxes()) b.closest("tr")?.classList.toggle("selected", b.checked);
}

document.addEventListener("change", (e) => {
  if (e.target instanceof HTMLInputElement && e.target.matches("[data-compare-box]")) update();
});

form?.addEventListener("submit", (e) => {
  e.preventDefault();
  const ids = [...new Set(boxes().filter((b) => b.checked).map((b) => b.value))];
  window.location.href = `${form.action}?runs=${ids.map(encodeURIComponent).join(",")}`;
});

// x toggles the focused row's checkbox (j/k move between rows, see base.js).
document.addEventListener("keydown", (e) => {
  if (e.key !== "x" || e.ctrlKey || e.metaKey || e.altKey) return;
  const row = document.activeElement?.closest?.("[data-nav-item]");
  const box = row?.querySelector("[data-compare-box]");
  if (box) {
    box.checked = !box.checked;
    update();
    e.preventDefault();
  }
});
update();

// ---- Live rows ----

const rowIds = (root) => [...root.querySelectorAll("[data-run-row]")].map((r) => r.dataset.runRow);
// What a region holds besides its rows' cells: which rows, in which order, and its
// pages line ("page 1 of 3"); when it changes, the region is shown anew.
const shape = (root) => `${rowIds(root).join()}|${root.querySelector("[data-pages]")?.textContent || ""}`;
const rowIn = (root, id) => root.querySelector(`[data-run-row="${CSS.escape(id)}"]`);

function bump(name) {
  document.body.dataset[name] = String(Number(document.body.dataset[name] || 0) + 1);
}

/** Replace the node `selector` finds with the fresh page's, or remove it, or add the
 * fresh one after .page-head (the banner of a run that started meanwhile). */
export function swap(page, selector) {
  const fresh = page.querySelector(selector);
  const old = document.querySelector(selector);
  if (old && fresh) {
    if (!old.isEqualNode(fresh)) old.replaceWith(document.importNode(fresh, true));
  } else if (old) old.remove();
  else if (fresh) document.querySelector(".page-head")?.after(document.importNode(fresh, true));
}

/** The same rows in the same order: each row's changed cells replaced, its compare box
 * (the reader's choice) left alone. */
function patchRows(old, fresh) {
  for (const row of fresh.querySelectorAll("[data-run-row]")) {
    const mine = rowIn(old, row.dataset.runRow);
    mine.toggleAttribute("data-live-row", row.hasAttribute("data-live-row"));
    [...row.cells].forEach((cell, i) => {
      const cur = mine.cells[i];
      if (cell.classList.contains("col-cmp") || (cur && cur.isEqualNode(cell))) return;
      if (cur) cur.replaceWith(document.importNode(cell, true));
      else mine.append(document.importNode(cell, true));
    });
    while (mine.cells.length > row.cells.length) mine.lastElementChild.remove();
  }
}

/** Rows came, went or moved: the whole region anew, with the ticks, the j/k marker
 * and the focus it had, found by run id. */
function replaceRegion(old, fresh, ticked) {
  const focused = document.activeElement;
  const focusRow = old.contains(focused) ? focused.closest("[data-run-row]")?.dataset.runRow : null;
  const current = old.querySelector("[data-run-row].current")?.dataset.runRow;
  const region = document.importNode(fresh, true);
  for (const box of region.querySelectorAll("[data-compare-box]")) box.checked = ticked.has(box.value);
  if (current) rowIn(region, current)?.classList.add("current");
  old.replaceWith(region);
  if (focusRow) rowIn(region, focusRow)?.querySelector("[data-nav-link]")?.focus({ preventScroll: true });
}

function apply(page) {
  const ticked = new Set(boxes().filter((b) => b.checked).map((b) => b.value));
  swap(page, "[data-run-counts]");
  swap(page, "[data-live-banner]");
  for (const fresh of page.querySelectorAll("[data-rows-region]")) {
    const key = CSS.escape(fresh.dataset.rowsRegion);
    const old = document.querySelector(`[data-rows-region="${key}"]`);
    if (!old) continue;
    if (shape(old) === shape(fresh)) patchRows(old, fresh);
    else replaceRegion(old, fresh, ticked);
  }
  update();
}

async function load() {
  try {
    const r = await fetch(location.pathname + location.search, { credentials: "same-origin" });
    if (!r.ok || r.redirected) throw new Error(`HTTP ${r.status}`); // signed out: the login page
    const page = new DOMParser().parseFromString(await r.text(), "text/html");
    if (page.body?.dataset.page !== document.body.dataset.page) throw new Error("another page");
    apply(page);
    bump("rowsPolls");
    document.dispatchEvent(new CustomEvent("runs:refreshed"));
    return true;
  } catch {
    return false;
  }
}

function every() {
  const ms = Number(document.querySelector("[data-live-every-ms]")?.dataset.liveEveryMs);
  return ms > 0 ? ms : 5000;
}

const poller = livePoller({
  isLive: () => Boolean(document.querySelector("[data-live-row]")),
  every,
  load,
  flag: "rowsLive",
});

/** Fetch the page and show it; a call while a fetch is under way shares that fetch.
 * Resolves to whether the page was shown. */
export const refresh = poller.refresh;

poller.schedule();
