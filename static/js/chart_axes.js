// What a metric chart's axes and values read as: series colours, tick labels (whole
// steps, tiny values in scientific notation), y ranges, the magnitude split between
// two axes, axis titles fitted to their room, and the words for values that are not
// numbers (NaN, +-inf). Functions, for chart.js and the pages that draw their own.

import uPlot from "../vendor/uplot/uPlot.esm.js";
import { el, num } from "./util.js";

const PALETTE = ["#3d5afe", "#e8590c", "#2b8a3e", "#ae3ec9", "#1098ad", "#f59f00", "#d6336c", "#5c940d"];

export function colour(i) {
  return PALETTE[i % PALETTE.length];
}

export function finiteOrNull(v) {
  const x = num(v);
  return x === null || !Number.isFinite(x) ? null : x;
}

/** NaN, Infinity or -Infinity (the API's strings or numbers); null for anything else. */
export function nonFinite(v) {
  const x = num(v);
  return x === null || Number.isFinite(x) ? null : x;
}

/** How a value that is not a number is written: "NaN", "+∞", "−∞". */
export function oddName(v) {
  return Number.isNaN(v) ? "NaN" : v > 0 ? "+\u221e" : "\u2212\u221e";
}

/** Steps as a short phrase: "step 7", "steps 7, 9, 12", "12 steps (7 to 40)". */
export function stepsPhrase(steps) {
  const s = [...steps].sort((a, b) => a - b);
  if (s.length === 1) return `step ${s[0]}`;
  if (s.length <= 4) return `steps ${s.join(", ")}`;
  return `${s.length} steps (${s[0]} to ${s[s.length - 1]})`;
}

/** What a series logged that is not a number, as a phrase: "NaN at step 7; +∞ at
 *  step 9" (``odd``: step -> NaN / ±Infinity). */
export function oddPhrase(odd) {
  const byKind = new Map();
  for (const [step, v] of odd) {
    const kind = oddName(v);
    if (!byKind.has(kind)) byKind.set(kind, []);
    byKind.get(kind).push(step);
  }
  return [...byKind].map(([kind, steps]) => `${kind} at ${stepsPhrase(steps)}`).join("; ");
}

/** Tick labels with just enough decimals to tell neighbours apart and to say each
 *  value truly (not "3.978, 3.978"); thousands and millions as k / M so a label such
 *  as 10,000 fits the axis. */
// The x axis counts training steps: whole-number ticks only (a 6-step run was
// labelled 1, 1.25, 1.5, ...). Every chart with a step axis uses these (compare.js too).
export const STEP_INCRS = [1, 2, 5].flatMap((m) => [1, 10, 100, 1e3, 1e4, 1e5, 1e6].map((p) => m * p)).sort((a, b) => a - b);

export function tickLabels(splits) {
  if (!splits.length) return [];
  const finite = splits.filter((v) => v !== null && Number.isFinite(v));
  const big = Math.max(0, ...finite.map(Math.abs));
  const [div, suffix] = big >= 1e6 ? [1e6, "M"] : big >= 1e4 ? [1e3, "k"] : [1, ""];
  if (big > 0 && big < 1e-3) return tinyLabels(splits); // not "0.00000030"
  const scaled = splits.map((v) => (v === null ? null : v / div));
  const gaps = scaled.slice(1).map((v, i) => Math.abs(v - scaled[i])).filter((g) => g > 0);
  const step = gaps.length ? Math.min(...gaps) : Math.abs(scaled[0]) || 1;
  for (let dec = 0; dec <= 12; dec++) {
    const labels = scaled.map((v) => (v === null ? "" : v.toFixed(dec)));
    const exact = scaled.every((v, i) => v === null || Math.abs(Number(labels[i]) - v) <= step * 1e-3);
    if (exact && new Set(labels).size === labels.length) return labels.map((l) => (l && l !== "-0" ? l + suffix : l === "-0" ? "0" : l));
  }
  return scaled.map((v) => (v === null ? "" : v.toPrecision(6) + suffix));
}

/** Ticks of a log scale (decades and their multiples, some left unlabelled: null),
 *  each as short as it is exact: "0.01", "0.2", "5", "300", "20k", "3e−5". */
export function logTickLabels(splits) {
  return splits.map((v) => {
    if (v === null || v === undefined || !Number.isFinite(v)) return "";
    const a = Math.abs(v);
    if (a >= 1e6) return `${Number((v / 1e6).toPrecision(3))}M`;
    if (a >= 1e4) return `${Number((v / 1e3).toPrecision(3))}k`;
    if (a > 0 && a < 1e-3) return v.toExponential(0).replace("e-", "e−");
    return String(Number(v.toPrecision(3)));
  });
}

/** Ticks of values all under 1e-3 in scientific notation, with the fewest digits
 *  that tell neighbours apart ("2.5e-7", "3e-7"; 0 as "0"). */
function tinyLabels(splits) {
  for (let d = 0; d <= 6; d++) {
    const labels = splits.map((v) => (v === null ? "" : v === 0 ? "0" : v.toExponential(d).replace("e-", "e\u2212")));
    if (new Set(labels).size === labels.length) return labels;
  }
  return splits.map((v) => (v === null ? "" : v.toExponential(6)));
}

/** The y range: uPlot's padded range, except that a flat series sits in a small
 *  band around its value (all-zero clip ratios on 0..1, not on 0..100). "Flat"
 *  includes flat to float noise (ratios of 1 +- 1e-6, a spread under 1e-5 of the value): uPlot's finest tick step
 *  (1e-16) adds nothing to 1.0, and its tick loop then never ended ("Invalid array
 *  length"). */
export function yRange(min, max) {
  if (min === null || max === null || !Number.isFinite(min) || !Number.isFinite(max)) return [0, 1];
  const mag = Math.max(Math.abs(min), Math.abs(max));
  if (max - min <= mag * 1e-5) {
    if (mag === 0) return [0, 1];
    const mid = (min + max) / 2;
    const pad = (Math.abs(mid) || mag) * 0.1;
    return [mid - pad, mid + pad];
  }
  return uPlot.rangeNum(min, max, 0.1, true);
}

/** The y axis as wide as its longest label (uPlot asks again when they change). */
export function axisWidth(u, values) {
  if (!values || !values.length) return 48;
  const ctx = u.ctx;
  ctx.save();
  ctx.font = `${12 * devicePixelRatio}px system-ui, -apple-system, sans-serif`;
  const widest = Math.max(...values.map((v) => ctx.measureText(String(v)).width)) / devicePixelRatio;
  ctx.restore();
  return Math.max(40, Math.ceil(widest) + 18);
}

/** The names' shared prefix up to its last "/", "_" or "." with a "*" for the rest
 *  ("rollout/ratio_*"), or the first name and how many more. */
function sharedHead(names) {
  let p = names[0];
  for (const n of names) while (!n.startsWith(p)) p = p.slice(0, -1);
  const cut = Math.max(p.lastIndexOf("/"), p.lastIndexOf("_"), p.lastIndexOf("."));
  return cut > 0 ? `${p.slice(0, cut + 1)}*` : `${names[0]} +${names.length - 1}`;
}

/** ``text`` cut in its middle: its path's middle parts ("train/…/mean_length"). */
function dropMiddleParts(text) {
  const parts = text.split("/");
  return parts.length >= 3 ? `${parts[0]}/\u2026/${parts[parts.length - 1]}` : text;
}

/** ``text`` cut to ``n`` characters with an ellipsis in its middle (more of the end
 *  kept: a name's last part tells series apart). */
function cutMiddle(text, n) {
  if (text.length <= n) return text;
  const head = Math.floor((n - 1) * 0.4);
  const tail = n - 1 - head;
  return `${text.slice(0, head)}\u2026${tail > 0 ? text.slice(-tail) : ""}`;
}

/** An axis title that fits (``fits(text)``: whether it does; by default ~28
 *  characters, what 12-px text beside a 220-px chart holds): the series' names, or
 *  their shared prefix (to its last "/", "_" or ".") with a "*" for the rest, or a
 *  name without its path's middle ("train/…/mean_length (right axis)"), the suffix
 *  dropped before the name is cut any further, which is then cut in its middle. The
 *  legend names each series whole (and so does the title's tooltip, see
 *  MetricChart). */
export function axisTitle(names, suffix = "", fits = (t) => t.length <= 28) {
  const whole = names.join(", ") + suffix;
  if (!names.length || fits(whole)) return whole;
  const base = names.length > 1 ? sharedHead(names) : names[0];
  const short = dropMiddleParts(base);
  for (const t of [base + suffix, short + suffix, base, short]) if (fits(t)) return t;
  for (let n = short.length - 1; n >= 2; n--) {
    const t = cutMiddle(short, n);
    if (fits(t)) return t;
  }
  return "\u2026";
}

/** The magnitude split: ``null`` when every series fits one axis, else a boolean per
 *  series, true for those on the second (right) axis: the larger ones, past the
 *  widest gap of at least ``ratio`` between the series' largest absolute values. */
export function splitScales(cols, ratio = 100) {
  const mags = cols.map((col) => {
    let m = 0;
    for (const v of col) if (v !== null && Number.isFinite(v)) m = Math.max(m, Math.abs(v));
    return m > 0 ? Math.log10(m) : null;
  });
  const known = mags.filter((m) => m !== null).sort((a, b) => a - b);
  let cut = null;
  let widest = Math.log10(ratio);
  for (let i = 1; i < known.length; i++) {
    if (known[i] - known[i - 1] >= widest) {
      widest = known[i] - known[i - 1];
      cut = known[i];
    }
  }
  return cut === null ? null : mags.map((m) => m !== null && m >= cut);
}

/** A chart's (MetricChart's) every axis title as long as the plot has room for (a y title runs along the
 *  plot's height, centred on it: "train/completions/mean_length (right axis)" was
 *  cut at both ends), measured in the axis's own font; the full names are the
 *  title's tooltip (``placeTitleTips``). */
export function fitTitles(chart, u) {
  const ctx = u.ctx;
  const canvasH = ctx.canvas.height;
  const mid = u.bbox.top + u.bbox.height / 2;
  let changed = false;
  ctx.save();
  u.axes.forEach((axis, i) => {
    const want = chart.titles?.[i];
    if (!want || axis.label == null) return;
    const vertical = axis.side === 1 || axis.side === 3;
    const room = (vertical ? 2 * Math.min(mid, canvasH - mid) : u.bbox.width) - 2 * devicePixelRatio;
    ctx.font = Array.isArray(axis.labelFont) ? axis.labelFont[0] : axis.labelFont;
    const label = axisTitle(want[0], want[1], (t) => ctx.measureText(t).width <= room);
    if (label !== axis.label) {
      axis.label = label;
      changed = true;
    }
  });
  ctx.restore();
  if (changed) u.redraw(false, true);
}

/** A tooltip over each y axis title naming its series whole (a title may be
 *  shortened to fit). */
export function placeTitleTips(chart, u) {
  const wrap = u.root.querySelector(".u-wrap");
  if (!wrap) return;
  u.axes.forEach((axis, i) => {
    const want = chart.titles?.[i];
    if (!want || axis.label == null || !(axis.side === 1 || axis.side === 3) || !axis.show) return;
    chart.tips = chart.tips || [];
    let tip = chart.tips[i];
    if (!tip || tip.parentElement !== wrap) {
      tip = el("div", { class: "u-axis-title", "data-axis-title": String(i) });
      wrap.append(tip);
      chart.tips[i] = tip;
    }
    const full = want[0].join(", ") + want[1];
    tip.title = full;
    tip.setAttribute("aria-label", full);
    const size = axis.labelSize || 20;
    tip.style.left = `${axis.side === 3 ? axis._lpos - size : axis._lpos}px`;
    tip.style.top = `${u.bbox.top / devicePixelRatio}px`;
    tip.style.width = `${size}px`;
    tip.style.height = `${u.bbox.height / devicePixelRatio}px`;
  });
}
