// The group browser (templates/pages/trajectories.html): a group's cards in rows as
// even as their width allows. Wrapped as they came, a group of 8 read 7 + 1 at
// 1400 px, the last card alone on its row. Each group is laid out in as few rows as
// fit its widest card, their lengths at most one card apart (8: 4 + 4; 7 in rows of
// three: 3 + 2 + 2), in columns (app.css: .rollouts[data-per-row]); again when the
// page's width changes. The columns are at least the widest card's natural width
// (--card-w) and grow with the room left, up to 1.6 times it: 8 cards at 1400 px
// read 4 + 4 across most of the panel, not 4 + 4 in its left half. Without this
// script the cards wrap as they come.

const GROUPS = ".rollouts";

/** Row lengths for `n` cards, at most `room` a row: as few rows as that allows, the
 * longer ones first, none more than one card longer than another. */
export function rowLengths(n, room) {
  if (n < 1) return [];
  const rows = Math.ceil(n / Math.max(1, room));
  const per = Math.ceil(n / rows);
  const long = n - rows * (per - 1); // rows of `per` cards; the others have one less
  return Array.from({ length: rows }, (_, i) => (i < long ? per : per - 1));
}

function cardsOf(box) {
  return [...box.children].filter((c) => c.matches(".rollout"));
}

function layOut() {
  const boxes = [...document.querySelectorAll(GROUPS)];
  // Measured as they wrap by themselves (each card as wide as its content), then
  // laid out: one reflow for the page, not one per group.
  for (const box of boxes) {
    delete box.dataset.perRow;
    for (const card of cardsOf(box)) card.classList.remove("row-start");
  }
  const plans = boxes.map((box) => {
    const cards = cardsOf(box);
    const gap = parseFloat(getComputedStyle(box).columnGap) || 0;
    const widest = Math.max(0, ...cards.map((c) => c.getBoundingClientRect().width));
    const room = widest ? Math.floor((box.clientWidth + gap + 0.5) / (widest + gap)) : 1;
    return { box, cards, widest, rows: rowLengths(cards.length, room) };
  });
  for (const { box, cards, widest, rows } of plans) {
    if (!rows.length || !widest) continue;
    // One row too: its cards grow as a longer group's do, the page's cards alike.
    box.style.setProperty("--per-row", String(rows[0]));
    box.style.setProperty("--card-w", `${widest}px`);
    box.dataset.perRow = String(rows[0]);
    let i = 0;
    for (const length of rows) {
      cards[i].classList.add("row-start");
      i += length;
    }
  }
}

let width = -1;
let pending = false;
function onResize(entries) {
  const w = Math.round(entries[0].contentRect.width);
  if (w === width || pending) return;
  width = w;
  pending = true;
  requestAnimationFrame(() => {
    pending = false;
    layOut();
  });
}

const list = document.querySelector("[data-nav-list]");
if (list && list.querySelector(GROUPS)) {
  layOut();
  // Cards laid out before a font arrived are measured again once they all have.
  document.fonts?.ready.then(layOut);
  width = Math.round(list.getBoundingClientRect().width);
  new ResizeObserver(onResize).observe(list);
}
