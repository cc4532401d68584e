// One trajectory: the token heatmap over every segment, colour-by switch, plain-text
// toggle. Keyboard: j/k next/previous rollout of the step (base.js).

import { Heatmap, colourName } from "./heatmap.js";
import { fmt, readJSONScript } from "./util.js";

const data = readJSONScript("heatmap-data");
const tooltip = document.querySelector("[data-tooltip]");
const boxes = new Map([...document.querySelectorAll("[data-heat]")].map((n) => [Number(n.dataset.heat), n]));
const heat = new Heatmap(data, (k) => boxes.get(k) || null, tooltip);
const scaleText = document.querySelector("[data-heat-scale]");
const legendBar = document.querySelector("[data-heat-legend]");
const status = document.querySelector("[data-heat-status]");
const plain = document.querySelector("[data-plain-text]");

// A segment recorded as text only (an imported or TRL run) has no tokens to colour:
// its text stays shown.
function showHeat(on) {
  for (const box of boxes.values()) box.hidden = !on || !box.childElementCount;
  for (const t of document.querySelectorAll("[data-seg-text]")) t.hidden = on && Number(t.dataset.n) > 0;
}

const t0 = performance.now();
heat.render("advantage");
const ms = performance.now() - t0;
document.body.dataset.heatMs = ms.toFixed(1);
document.body.dataset.heatTokens = String(heat.tokenCount);
showHeat(true);
// The legend's range: one-sided where every value is (log-probs are never above 0,
// entropies never below), the bar's other half hidden.
function legend() {
  const { neg, pos } = heat.range;
  const s = fmt(heat.scale, 3);
  const side = neg && !pos ? "neg" : pos && !neg ? "pos" : "";
  scaleText.textContent = side === "neg" ? `−${s} … 0` : side === "pos" ? `0 … ${s}` : `±${s}`;
  // Named as the menu and the token tooltip name it (heatmap.js NAMES).
  scaleText.title = `${colourName(heat.by)}: ${scaleText.textContent}`;
  if (legendBar) legendBar.title = scaleText.title;
  if (legendBar) legendBar.dataset.side = side;
}

// A page recorded as text only has no colour controls (the page says so instead).
if (scaleText) legend();
if (status) {
  status.textContent = `${heat.tokenCount} tokens in all (prompt, actions and tool answers)` // the drawing time: body.dataset.heatMs
    + (heat.idsOnly ? " · shown by token id (import with --tokenizer to read them as text)" : "");
}

document.querySelector("[data-colour-by]")?.addEventListener("change", (e) => {
  heat.recolour(e.target.value);
  legend();
});
plain?.addEventListener("change", () => showHeat(!plain.checked));
