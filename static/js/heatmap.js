// Token heatmap: every token of a trajectory as a <span> coloured by a per-token value
// (advantage by default), built in one pass per segment into a DocumentFragment with
// textContent (model text is never parsed as HTML). Colours are 21 CSS classes
// (hb-n10 .. hb-0 .. hb-p10), so no style attribute is ever written. One shared
// tooltip element shows a token's numbers on hover (event delegation, not a
// listener per token).

import { fmt, num } from "./util.js";

const FIELDS = ["logprob", "old_logprob", "ratio", "entropy", "advantage"];

// One name for each per-token quantity, wherever the page names it: the colour-by
// menu (templates/pages/trajectory.html), the token tooltip and the legend's title.
// The learner's log-prob (``logprob``) and the sampler's (``old_logprob``) as the run
// page's "Sampler vs learner log-probs" chart names them.
export const NAMES = {
  logprob: "learner log-prob",
  old_logprob: "sampler log-prob",
  ratio: "ratio",
  entropy: "entropy",
  advantage: "advantage",
};

/** What the tokens are coloured by, named as the colour-by menu names it: ratios
 * are coloured by ratio − 1 (0 where sampler and learner agree); a trainer's own
 * series (``series:<name>``) by its name. */
export function colourName(by) {
  if (by.startsWith("series:")) return by.slice(7);
  return by === "ratio" ? "ratio − 1" : NAMES[by] || by;
}

/** A token's value for the tooltip: stored arrays hold NaN where no value was
 * computed (a prompt token, the first token, a sender's null). */
function tokenValue(v) {
  const x = num(v);
  return x === null || Number.isNaN(x) ? "— (not computed)" : fmt(x);
}

// GPT-2's printable stand-in of each byte (byte-level BPE writes a space as "Ġ").
const BYTE_OF = (() => {
  const keep = [];
  for (let b = 33; b <= 126; b++) keep.push(b);
  for (let b = 0xa1; b <= 0xac; b++) keep.push(b);
  for (let b = 0xae; b <= 0xff; b++) keep.push(b);
  const chars = [...keep];
  let extra = 0;
  for (let b = 0; b < 256; b++) {
    if (!keep.includes(b)) { keep.push(b); chars.push(256 + extra); extra++; }
  }
  const out = new Map();
  keep.forEach((b, i) => out.set(String.fromCharCode(chars[i]), b));
  return out;
})();

/** Bytes of a byte-level or SentencePiece piece, or null when it is not one. */
function pieceBytes(piece, scheme) {
  if (scheme === "byte") {
    const out = [];
    for (const c of piece) {
      if (!BYTE_OF.has(c)) return null;
      out.push(BYTE_OF.get(c));
    }
    return out;
  }
  const m = /^<0x([0-9A-Fa-f]{2})>$/.exec(piece);
  if (m) return [parseInt(m[1], 16)];
  return [...new TextEncoder().encode(piece.replaceAll("\u2581", " "))];
}

/**
 * The text each token adds to its segment: the sender's ``token_text`` where it
 * recorded one (our trainer does), else the pieces read as their tokenizer writes
 * them: byte-level BPE ("Ġ", "Ċ") and SentencePiece ("▁", "<0xE4>") through their
 * bytes (a character split over tokens shows with the token completing it), WordPiece
 * ("##") joined, anything else spaced.
 */
export function readable(seg) {
  const tokens = seg.tokens || [];
  if (Array.isArray(seg.token_text) && seg.token_text.length === tokens.length) {
    return seg.token_text;
  }
  const joined = tokens.join("");
  const scheme = /[\u0120\u010a\u0109]/.test(joined) ? "byte"
    : joined.includes("\u2581") ? "sp" : "word";
  if (scheme === "word") {
    return tokens.map((t, i) => (t.startsWith("##") ? t.slice(2) : (i ? " " : "") + t));
  }
  const utf8 = new TextDecoder("utf-8");
  return tokens.map((t, i) => {
    const bytes = pieceBytes(t, scheme);
    if (bytes === null) return utf8.decode() + t; // an added token: its own text
    const last = i === tokens.length - 1;
    return utf8.decode(new Uint8Array(bytes), { stream: !last });
  });
}

/**
 * A token's text into its span, as it is: each newline or tab in an <i> that the
 * stylesheet marks (↵, →), so the page's text stays the decoded text (copy, find in
 * page). An empty token (part of a character the next token completes) is marked by
 * the stylesheet too (.te). Text nodes only: model text is never parsed as HTML.
 */
function fill(span, text) {
  for (const part of (text || "").split(/([\n\t])/)) {
    if (!part) continue;
    if (part === "\n" || part === "\t") {
      const mark = document.createElement("i");
      mark.className = part === "\n" ? "nl" : "tb";
      mark.textContent = part;
      span.append(mark);
    } else {
      span.append(part);
    }
  }
}

const ROLES = new Set(["system", "user", "assistant", "tool", "ipython", "developer"]);

/** A turn's block: its role as a heading, then its tokens (appended by the caller). */
function turnBlock(role) {
  const turn = document.createElement("div");
  turn.className = ROLES.has(role) ? `turn role-${role}` : "turn";
  turn.dataset.turn = role;
  const head = document.createElement("b");
  head.className = "turn-role";
  head.textContent = role;
  turn.append(head);
  return turn;
}

/**
 * The value a token is coloured by, signed so that the colour scale is symmetric.
 * ``series:<name>``: one of the per-token arrays another trainer keeps beyond ours
 * (prime-rl's mismatch_kl, miles's ref_log_probs...), as it sent it.
 */
function valueOf(seg, i, by) {
  if (by.startsWith("series:")) return num(seg.series?.[by.slice(7)]?.[i]);
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

// Why the update left a single token of a trained segment out of the loss.
const MASKED_WHY = {
  is_ratio: "sampler/learner ratio out of bounds (masked IS)",
  low_entropy: "below the top-entropy quantile",
  not_sampled: "template scaffold, not sampled by the model",
  trust_region: "probability moved past prime-rl's DPPO trust region",
};

/** position -> reason of the segment's single masked tokens. */
function maskedTokens(seg) {
  const out = new Map();
  for (const m of seg.masked || []) {
    if (Array.isArray(m) && Number.isInteger(m[0])) out.set(m[0], String(m[1]));
  }
  return out;
}

/**
 * The trained tokens' values of ``by``: ``scale``, their largest magnitude (1 when
 * there is none), and whether any is below or above 0 (``neg``, ``pos``): log-probs
 * are never above 0 and entropies never below, so their legends are one-sided.
 */
export function rangeFor(segments, by) {
  let m = 0;
  let neg = false;
  let pos = false;
  for (const seg of segments) {
    if (seg.mask) continue;
    const masked = maskedTokens(seg);
    const n = (seg.tokens || []).length;
    for (let i = 0; i < n; i++) {
      if (masked.has(i)) continue;
      const v = valueOf(seg, i, by);
      if (v === null || !Number.isFinite(v)) continue;
      m = Math.max(m, Math.abs(v));
      neg ||= v < 0;
      pos ||= v > 0;
    }
  }
  return { scale: m || 1, neg, pos };
}

function binClass(v, scale) {
  if (v === null || !Number.isFinite(v)) return "tn";
  const b = Math.max(-10, Math.min(10, Math.round((v / scale) * 10)));
  return b === 0 ? "hb-0" : b > 0 ? `hb-p${b}` : `hb-n${-b}`;
}

/**
 * A segment whose tokens are ids only (an import without a tokenizer): each token
 * shown as "#id", so its numbers can still be coloured and read on hover.
 */
function withPieces(seg) {
  const ids = seg.token_ids || [];
  if ((seg.tokens || []).length || !ids.length) return seg;
  const labels = ids.map((id) => `#${id}`);
  return { ...seg, tokens: labels, token_text: labels.map((l, i) => (i ? " " : "") + l), idsOnly: true };
}

export class Heatmap {
  /**
   * @param {{segments: object[]}} data  the trajectory's segments with token arrays
   * @param {(k: number) => HTMLElement|null} containerFor  where segment k goes
   * @param {HTMLElement} tooltip  the one shared tooltip element
   */
  constructor(data, containerFor, tooltip) {
    this.segments = (data.segments || []).map(withPieces);
    this.containerFor = containerFor;
    this.tooltip = tooltip;
    this.spans = []; // per segment: its token spans (recoloured in place)
    this.by = "advantage";
    this.range = { scale: 1, neg: false, pos: false };
  }

  /** The colour scale: the largest magnitude of the values coloured by. */
  get scale() {
    return this.range.scale;
  }

  /** Whether some segment shows token ids for want of a tokenizer. */
  get idsOnly() {
    return this.segments.some((s) => s.idsOnly);
  }

  get tokenCount() {
    return this.segments.reduce((n, s) => n + (s.tokens || []).length, 0);
  }

  render(by = this.by) {
    this.by = by;
    this.range = rangeFor(this.segments, by);
    this.segments.forEach((seg, k) => {
      const box = this.containerFor(k);
      if (!box) return;
      const frag = document.createDocumentFragment();
      const tokens = seg.tokens || [];
      const texts = readable(seg);
      seg.texts = texts;
      const special = new Set(seg.special || []);
      const turns = new Map((seg.turns || []).map(([i, role]) => [i, role]));
      const spans = new Array(tokens.length);
      seg.maskedAt = maskedTokens(seg);
      let into = frag; // tokens before the segment's first turn continue the last one
      for (let i = 0; i < tokens.length; i++) {
        const masked = seg.mask || seg.maskedAt.has(i) ? " tm" : "";
        if (turns.has(i)) {
          into = turnBlock(turns.get(i));
          frag.append(into);
        }
        const span = document.createElement("span");
        fill(span, texts[i]);
        span.className = binClass(valueOf(seg, i, by), this.scale) + masked;
        if (special.has(i)) span.classList.add("tsp");
        if (!texts[i]) span.classList.add("te");
        span.dataset.t = `${k}.${i}`;
        spans[i] = span;
        into.append(span);
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
    this.range = rangeFor(this.segments, by);
    this.segments.forEach((seg, k) => {
      const special = new Set(seg.special || []);
      (this.spans[k] || []).forEach((span, i) => {
        const masked = seg.mask || seg.maskedAt?.has(i) ? " tm" : "";
        span.className = binClass(valueOf(seg, i, by), this.scale) + masked;
        if (special.has(i)) span.classList.add("tsp");
        if (!seg.texts?.[i]) span.classList.add("te");
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
    for (const f of FIELDS) rows.push([NAMES[f], tokenValue(seg[f]?.[i])]);
    for (const [name, values] of Object.entries(seg.series || {})) {
      rows.push([name, tokenValue(values?.[i])]);
    }
    rows.push(["piece", seg.tokens[i] ?? "—"]);
    rows.push(["token id", String(seg.token_ids?.[i] ?? "—")]);
    if ((seg.special || []).includes(i)) rows.push(["special", "yes"]);
    const one = seg.maskedAt?.get(i);
    rows.push([
      "mask",
      seg.mask
        ? `${seg.mask} (not trained on)`
        : one
          ? `${one}: ${MASKED_WHY[one] || "left out"} (not trained on)`
          : "trained on",
    ]);
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
    tok.textContent = JSON.stringify(seg.texts?.[i] ?? seg.tokens[i]);
    tip.replaceChildren(tok, dl);
    tip.hidden = false;
    const r = span.getBoundingClientRect();
    const x = Math.min(window.innerWidth - 330, Math.max(4, r.left));
    const below = r.bottom + 6 + tip.offsetHeight < window.innerHeight;
    tip.style.left = `${x}px`;
    tip.style.top = `${below ? r.bottom + 6 : r.top - tip.offsetHeight - 6}px`;
  }
}
