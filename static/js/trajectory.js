// One trajectory: the token heatmap over every segment, colour-by switch, plain-text
// toggle. Keyboard: j/k next/previous rollout of the step (base.js).

import { Heatmap } from "./heatmap.js";
import { fmt, readJSONScript } from "./util.js";

const data = readJSONScript("heatmap-data");
const tooltip = document.querySelector("[data-tooltip]");
const boxes = new Map([...document.querySelectorAll("[data-heat]")].map((n) => [Number(n.dataset.heat), n]));
const heat = new Heatmap(data, (k) => boxes.get(k) || null, tooltip);
const scaleText = document.querySelector("[data-heat-scale]");
const status = document.querySelector("[data-heat-status]");
const plain = document.querySelector("[data-plain-text]");

// A segment recorded as text only (an imported or TRL run) has no tokens to colour:
// its text stays shown.
function showHeat(on) {
  for (const box of boxes.values()) box.hidden = !on || !box.childElementCount;
  for (const t of document.querySelectorAll("[data-seg-text]")) t.hidden = on && Number(t.dataset.n) > 0;
}

const t0 = performance.now();
const scale = heat.render("advantage");
const ms = performance.now() - t0;
document.body.dataset.heatMs = ms.toFixed(1);
document.body.dataset.heatTokens = String(heat.tokenCount);
showHeat(true);
// A page recorded as text only has no colour controls (the page says so instead).
if (scaleText) scaleText.textContent = `±${fmt(scale, 3)}`;
if (status) {
  status.textContent = `${heat.tokenCount} tokens in all (prompt, actions and tool answers)` // the drawing time: body.dataset.heatMs
    + (heat.idsOnly ? " · shown by token id (import with --tokenizer to read them as text)" : "");
}

document.querySelector("[data-colour-by]")?.addEventListener("change", (e) => {
  const s = heat.recolour(e.target.value);
  scaleText.textContent = `±${fmt(s, 3)}`;
});
plain?.addEventListener("change", () => showHeat(!plain.checked));
