// Token heatmap: every token of a trajectory as a <span> coloured by a per-token value
// (advantage by default), built in one pass per segment into a DocumentFragment with
// textContent (model text is never parsed as HTML). Colours are 21 CSS classes
// (hb-n10 .. hb-0 .. hb-p10), so no style attribute is ever written. One shared
// tooltip element shows a token's numbers on hover (event delegation, not a
// listener per token).

import { fmt, num } from "./util.js";

const FIELDS = ["logprob", "old_logprob", "ratio", "entropy", "advantage"];

/** The value a token is coloured by, signed so that the colour scale is symmetric. */
function valueOf(seg, i, by) {
  if (by === "ratio") {
    const r = num(seg.ratio?.[i]);
    return r === null ? null : r - 1;
  }
  if (by === "logprob") {
    const v = num(seg.logprob?.[i]);
    return v === null ? null : v; // <= 0: more negative, more surprising (red)
  }
  return num(seg[by]?.[i]);
}

export function scaleFor(segments, by) {
  let m = 0;
  for (const seg of segments) {
    if (seg.mask) continue;
    const n = (seg.tokens || []).length;
    for (let i = 0; i < n; i++) {
      const v = valueOf(seg, i, by);
      if (v !== null && Number.isFinite(v)) m = Math.max(m, Math.abs(v));
    }
  }
  return m || 1;
}

function binClass(v, scale) {
  if (v === null || !Number.isFinite(v)) return "tn";
  const b = Math.max(-10, Math.min(10, Math.round((v / scale) * 10)));
  return b === 0 ? "hb-0" : b > 0 ? `hb-p${b}` : `hb-n${-b}`;
}

export class Heatmap {
  /**
   * @param {{segments: object[]}} data  the trajectory's segments with token arrays
   * @param {(k: number) => HTMLElement|null} containerFor  where segment k goes
   * @param {HTMLElement} tooltip  the one shared tooltip element
   */
  constructor(data, containerFor, tooltip) {
    this.segments = data.segments || [];
    this.containerFor = containerFor;
    this.tooltip = tooltip;
    this.spans = []; // per segment: its token spans (recoloured in place)
    this.by = "advantage";
    this.scale = 1;
  }

  get tokenCount() {
    return this.segments.reduce((n, s) => n + (s.tokens || []).length, 0);
  }

  render(by = this.by) {
    this.by = by;
    this.scale = scaleFor(this.segments, by);
    this.segments.forEach((seg, k) => {
      const box = this.containerFor(k);
      if (!box) return;
      const frag = document.createDocumentFragment();
      const tokens = seg.tokens || [];
      const spans = new Array(tokens.length);
      const masked = seg.mask ? " tm" : "";
      for (let i = 0; i < tokens.length; i++) {
        const span = document.createElement("span");
        span.textContent = tokens[i];
        span.className = binClass(valueOf(seg, i, by), this.scale) + masked;
        span.dataset.t = `${k}.${i}`;
        spans[i] = span;
        frag.append(span);
        if (i < tokens.length - 1) frag.append(" ");
      }
      box.replaceChildren(frag);
      this.spans[k] = spans;
      if (!box.dataset.hover) {
        box.dataset.hover = "1";
        box.addEventListener("mouseover", (e) => this.hover(e));
        box.addEventListener("mouseleave", () => { this.tooltip.hidden = true; });
      }
    });
    return this.scale;
  }

  /** Recolour without rebuilding the DOM (colour-by changes). */
  recolour(by) {
    this.by = by;
    this.scale = scaleFor(this.segments, by);
    this.segments.forEach((seg, k) => {
      const masked = seg.mask ? " tm" : "";
      (this.spans[k] || []).forEach((span, i) => {
        span.className = binClass(valueOf(seg, i, by), this.scale) + masked;
      });
    });
    return this.scale;
  }

  hover(e) {
    const span = e.target instanceof HTMLElement ? e.target.closest("span[data-t]") : null;
    if (!span) return;
    const [k, i] = span.dataset.t.split(".").map(Number);
    const seg = this.segments[k];
    const tip = this.tooltip;
    const rows = [];
    for (const f of FIELDS) rows.push([f.replace("_", " "), fmt(seg[f]?.[i])]);
    rows.push(["token id", String(seg.token_ids?.[i] ?? "—")]);
    rows.push(["mask", seg.mask ? `${seg.mask} (not trained on)` : "trained on"]);
    const dl = document.createElement("dl");
    for (const [dt, dd] of rows) {
      const a = document.createElement("dt");
      a.textContent = dt;
      const b = document.createElement("dd");
      b.textContent = dd;
      dl.append(a, b);
    }
    const tok = document.createElement("div");
    tok.className = "tok";
    tok.textContent = JSON.stringify(seg.tokens[i]);
    tip.replaceChildren(tok, dl);
    tip.hidden = false;
    const r = span.getBoundingClientRect();
    const x = Math.min(window.innerWidth - 330, Math.max(4, r.left));
    const below = r.bottom + 6 + tip.offsetHeight < window.innerHeight;
    tip.style.left = `${x}px`;
    tip.style.top = `${below ? r.bottom + 6 : r.top - tip.offsetHeight - 6}px`;
  }
}
