// A MetricChart's values that are not numbers (NaN, +-inf): marks on the plot's top
// (NaN, +inf) or bottom (-inf) edge at their step, the note under the plot that names
// them, and the room the y scales leave for those marks so that none covers another
// series' point (a NaN at the last step sat on top of the other series' last point).
// Every chart that plots steps draws them so: the run page's, the what-if panel's,
// compare's overlays (static/js/compare.js). Words reach the DOM through textContent.

import { colour, oddName, oddPhrase } from "./chart_axes.js";
import { el } from "./util.js";

// A mark is 14 px tall (10/12 px text and its border, app.css .u-odd); each series
// with marks has a lane of its own, LANE px below (top) or above (bottom) the last.
const LANE = 15;
// Past the lanes: a point's radius and a little air.
const AIR = 6;

const onTop = (v) => Number.isNaN(v) || v > 0;

/** Each series' lane (the order of the series with marks, null for one without), and
 *  how many lanes each edge uses (the deepest lane with a mark there, plus one). */
export function markLanes(chart) {
  const lanes = [];
  let top = 0;
  let bottom = 0;
  let next = 0;
  chart.odd.forEach((odd) => {
    if (!odd.size) {
      lanes.push(null);
      return;
    }
    const lane = next++;
    lanes.push(lane);
    const values = [...odd.values()];
    if (values.some(onTop)) top = lane + 1;
    if (values.some((v) => !onTop(v))) bottom = lane + 1;
  });
  return { lanes, top, bottom };
}

/** A y scale's range [lo, hi] widened so that the top (and bottom) edge keeps the
 *  room its lanes of marks take: no point is drawn under a mark. */
export function roomForMarks(chart, u, [lo, hi]) {
  const { top, bottom } = markLanes(chart);
  if (!top && !bottom) return [lo, hi];
  const height = u.bbox && u.bbox.height > 0 ? u.bbox.height / devicePixelRatio : 170;
  const padTop = top ? top * LANE + AIR : 0;
  const padBottom = bottom ? bottom * LANE + AIR : 0;
  const inner = Math.max(height - padTop - padBottom, height * 0.4);
  const per = (hi - lo) / inner;
  return [lo - padBottom * per, hi + padTop * per];
}

/** The marks, at their steps, in their series' colour, each with a tooltip
 *  ("train/grad_norm: NaN at step 7"); neighbours closer than a mark's width merge
 *  into one. */
export function placeOddMarks(chart, u) {
  for (const m of u.over.querySelectorAll(".u-odd")) m.remove();
  const [lo, hi] = [u.scales.x.min, u.scales.x.max];
  if (lo === null || hi === null || lo === undefined) return;
  const { lanes } = markLanes(chart);
  chart.keys.forEach((_, k) => {
    const odd = chart.odd[k];
    if (!odd.size) return;
    const clusters = [];
    const steps = [...odd.keys()].filter((s) => s >= lo && s <= hi).sort((a, b) => a - b);
    for (const step of steps) {
      const v = odd.get(step);
      const side = onTop(v) ? "top" : "bottom";
      const x = u.valToPos(step, "x");
      const last = clusters.findLast((c) => c.side === side);
      if (last && x - last.x1 < 26) {
        last.x1 = x;
        last.odd.set(step, v);
      } else clusters.push({ side, x0: x, x1: x, odd: new Map([[step, v]]) });
    }
    for (const c of clusters) {
      const kinds = new Set([...c.odd.values()].map(oddName));
      const mark = el("span", {
        class: `u-odd u-odd-${c.side}`,
        "data-odd-key": chart.keys[k],
        "data-odd-steps": [...c.odd.keys()].join(","),
        title: `${chart.labels[k]}: ${oddPhrase(c.odd)}`,
        text: kinds.size === 1 ? [...kinds][0] : [...kinds].join("/"),
      });
      mark.style.color = chart.colourOf ? chart.colourOf(k) : colour(k);
      mark.style.left = `${(c.x0 + c.x1) / 2}px`;
      mark.style.minWidth = `${Math.round(c.x1 - c.x0) + 22}px`;
      mark.style[c.side] = `${1 + lanes[k] * LANE}px`;
      u.over.append(mark);
    }
  });
}

/** The values that are not numbers, in words: after each series' name in the legend
 *  ("train/grad_norm: NaN at step 7", the whole list as its tooltip) and in a note
 *  under the plot, which says so plainly when nothing else was logged (the plot would
 *  look merely empty). */
export function noteOdd(chart) {
  const u = chart.plot;
  const phrases = chart.odd.map((m) => (m.size ? oddPhrase(m) : ""));
  const rows = u ? u.root.querySelectorAll(".u-legend .u-series") : [];
  chart.keys.forEach((_, k) => {
    const row = rows[k + 1];
    const label = row?.querySelector(".u-label");
    if (!label) return;
    if (label.dataset.name === undefined) label.dataset.name = label.textContent;
    const text = phrases[k] ? `${label.dataset.name} \u00b7 ${phrases[k]}` : label.dataset.name;
    if (label.textContent !== text) label.textContent = text;
    if (phrases[k]) row.title = `${chart.labels[k]}: ${phrases[k]} (not plotted; marked on the plot's edge)`;
    else row.removeAttribute("title");
  });
  const odd = chart.keys.flatMap((_, k) => (phrases[k] ? [`${chart.labels[k]}: ${phrases[k]}`] : []));
  let note = chart.noteEl;
  if (!odd.length) {
    if (note) note.hidden = true;
    return;
  }
  if (!note) {
    note = el("p", { class: "small chart-odd", "data-chart-odd": "", role: "note" });
    chart.el.after(note);
    chart.noteEl = note;
  }
  const anyNumber = u && u.data.slice(1, chart.keys.length + 1).some((col) => col.some((v) => v !== null));
  const text = anyNumber
    ? `Not numbers (marked on the plot's edge, no line through them): ${odd.join("; ")}.`
    : `Nothing to draw: every value logged here is not a number. ${odd.join("; ")}.`;
  note.classList.toggle("only-odd", !anyNumber);
  note.hidden = false;
  if (note.textContent !== text) note.textContent = text;
}
