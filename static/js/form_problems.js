// The run form's problems in its side panel (static/js/run_form.js): each one named
// by its field's label (with its row, "Weight of component “format”"; an error of a
// whole row or section by the row or section), a link that opens the folded sections
// around the field, scrolls to it and focuses it. Text only: a message may quote
// what the user typed.

import { el } from "./util.js";

const words = (node) => (node?.textContent || "").replace(/\s+/g, " ").trim();

/** The row an input or error list sits in, in words: "component “format”",
 *  "dimension “accuracy” of judge “rules”"; "" outside the reward's rows. */
function rowName(node) {
  const named = (row, what) => {
    const i = [...row.parentElement.children].indexOf(row) + 1;
    const name = row.querySelector(":scope > .row-head [name$='.label'], :scope > [name$='.label']")?.value.trim()
      || row.querySelector("[name$='.name']")?.value.trim();
    return name ? `${what} “${name}”` : `${what} ${i}`;
  };
  const dim = node.closest("[data-dimension-row]");
  const judge = node.closest("[data-judge-row]");
  const comp = node.closest("[data-component-row]");
  if (dim) return `${named(dim, "dimension")} of ${named(judge, "judge")}`;
  if (judge) return named(judge, "judge");
  return comp ? named(comp, "component") : "";
}

/** Where the error of ``path`` is shown: its label and the input a link focuses. */
export function problemPlace(form, path) {
  const list = form.querySelector(`[data-errors-for="${CSS.escape(path)}"]`);
  if (!list) return null;
  const usable = "input:not([type=hidden]), select, textarea";
  const field = list.closest(".field");
  const row = rowName(list);
  if (field) {
    const label = words(field.querySelector("label, .label")) || path;
    return { list, label: row ? `${label} of ${row}` : label, target: field.querySelector(usable) };
  }
  const box = list.closest("[data-dimension-row], .row-card, .lora, fieldset, details") || form;
  const section = words(box.querySelector(":scope > legend, :scope > summary, :scope > h3"));
  return { list, label: row ? `${row[0].toUpperCase()}${row.slice(1)}` : section || path, target: box.querySelector(usable) };
}

export function openAround(node) {
  for (let box = node?.closest("details"); box; box = box.parentElement?.closest("details")) box.open = true;
}

/** Open, scroll to and focus the field of the problem at ``path``. */
export function goToProblem(form, path) {
  const place = problemPlace(form, path);
  if (!place) return;
  openAround(place.list);
  (place.list.closest(".field") || place.list).scrollIntoView({ block: "center" });
  place.target?.focus({ preventScroll: true });
}

/** List ``errors`` (path -> [message]) in ``problemList``: each a link named by its
 *  field, those no field shows as text; hidden when there are none. */
export function showProblems(form, problemList, errors) {
  if (!problemList) return;
  const items = [];
  for (const [path, messages] of Object.entries(errors)) {
    const place = problemPlace(form, path);
    for (const m of messages) items.push({ path, place, m });
  }
  // In the form's order, top to bottom; problems no field shows (the whole form's) first.
  const before = (a, b) => (a === b ? 0 : a.compareDocumentPosition(b) & Node.DOCUMENT_POSITION_FOLLOWING ? -1 : 1);
  items.sort((a, b) => (!a.place || !b.place ? Number(Boolean(a.place)) - Number(Boolean(b.place)) : before(a.place.list, b.place.list)));
  problemList.replaceChildren(...items.map(({ path, place, m }) => (place
    ? el("li", {}, el("a", { href: place.target?.id ? `#${place.target.id}` : "#", "data-problem-for": path, text: place.label }), `: ${m}`)
    : el("li", { text: m }))));
  problemList.hidden = items.length === 0;
}

/** One piece of advice (``message`` on the field at ``path``) for the side panel,
 *  named and linked as a problem is; its path as code where no field shows it. */
export function adviceItem(form, path, message) {
  const place = problemPlace(form, path);
  const name = place
    ? el("a", { href: place.target?.id ? `#${place.target.id}` : "#", "data-problem-for": path, text: place.label })
    : el("code", { text: path });
  return el("li", { class: "sev-warning" }, name, `: ${message}`);
}
