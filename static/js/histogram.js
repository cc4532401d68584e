// A bar histogram on a canvas (the advantage distribution of one step's rollouts).

import { cssVar, num } from "./util.js";

export function histogram(values, bins = 20) {
  const xs = values.map(num).filter((v) => v !== null && Number.isFinite(v));
  if (!xs.length) return null;
  let lo = Math.min(...xs);
  let hi = Math.max(...xs);
  if (hi === lo) { lo -= 0.5; hi += 0.5; }
  const width = (hi - lo) / bins;
  const counts = new Array(bins).fill(0);
  for (const v of xs) counts[Math.min(bins - 1, Math.floor((v - lo) / width))] += 1;
  return { lo, hi, width, counts, n: xs.length };
}

export function drawHistogram(canvas, h) {
  const dpr = window.devicePixelRatio || 1;
  const w = canvas.clientWidth || 400;
  const ht = canvas.clientHeight || 180;
  canvas.width = Math.round(w * dpr);
  canvas.height = Math.round(ht * dpr);
  const ctx = canvas.getContext("2d");
  ctx.scale(dpr, dpr);
  ctx.clearRect(0, 0, w, ht);
  if (!h) return;
  const pad = { l: 30, r: 8, t: 8, b: 22 };
  const max = Math.max(...h.counts);
  const bw = (w - pad.l - pad.r) / h.counts.length;
  const muted = cssVar("--muted", "#666");
  h.counts.forEach((c, i) => {
    const x0 = h.lo + i * h.width;
    const mid = x0 + h.width / 2;
    ctx.fillStyle = mid >= 0 ? `rgb(${cssVar("--pos", "34,112,230")})` : `rgb(${cssVar("--neg", "214,56,48")})`;
    const bh = max ? (c / max) * (ht - pad.t - pad.b) : 0;
    ctx.fillRect(pad.l + i * bw + 1, ht - pad.b - bh, Math.max(1, bw - 2), bh);
  });
  ctx.fillStyle = muted;
  ctx.font = "11px system-ui, sans-serif";
  ctx.fillText(h.lo.toPrecision(3), pad.l, ht - 6);
  const hiText = h.hi.toPrecision(3);
  ctx.fillText(hiText, w - pad.r - ctx.measureText(hiText).width, ht - 6);
  ctx.fillText(String(max), 4, pad.t + 8);
  if (h.lo < 0 && h.hi > 0) {
    const zx = pad.l + ((0 - h.lo) / (h.hi - h.lo)) * (w - pad.l - pad.r);
    ctx.strokeStyle = muted;
    ctx.beginPath();
    ctx.moveTo(zx, pad.t);
    ctx.lineTo(zx, ht - pad.b);
    ctx.stroke();
  }
}
