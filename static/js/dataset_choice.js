// The new-run form's dataset choice (templates/pages/partials/dataset_choice.html): the
// user's uploads by the names they gave them. Choosing one writes its path (relative to
// its data root, what the config stores) and its prompt and answer fields into the
// dataset environment's inputs, then the live check runs; typing a path selects the
// upload it names, if any. The line under the choice names the upload the path reads.
// Names are the user's: they reach the page through textContent only (el()).

import { el } from "./util.js";

const form = document.getElementById("run-form");
const choice = form?.querySelector("[data-dataset-choice]");
const named = form?.querySelector("[data-dataset-named]");
const input = (name) => form.querySelector(`[name="envp.dataset.${name}"]`);

function set(name, value) {
  const box = input(name);
  if (!box || box.value === value) return;
  box.value = value;
  box.dispatchEvent(new Event("input", { bubbles: true }));
}

function describe(option) {
  if (!option || !option.value) {
    const uploads = choice.options.length > 1;
    named.replaceChildren(uploads
      ? "Choose one of your uploads, or give the path of a file under the data roots below."
      : el("span", {}, "Upload one on ", el("a", { href: named.dataset.uploadUrl, text: "Datasets" }),
        ", or give the path of a file under the data roots below."));
    return;
  }
  const d = option.dataset;
  const rows = Number(d.rows);
  named.replaceChildren("Reads your upload ", el("a", { href: d.url, text: d.name }),
    `: ${rows} row${rows === 1 ? "" : "s"}, prompt field `, el("code", { text: d.promptKey }),
    ", answer field ", el("code", { text: d.answerKey }), ". Its file on the server is the path below.");
}

if (choice && named) {
  choice.addEventListener("change", (e) => {
    e.stopPropagation(); // not a config input: the inputs it writes say what changed
    const option = choice.selectedOptions[0];
    if (option?.value) {
      set("prompt_key", option.dataset.promptKey);
      set("answer_key", option.dataset.answerKey);
      set("path", option.value);
    } else {
      set("path", "");
      input("path")?.focus();
    }
    describe(option);
  });
  input("path")?.addEventListener("input", () => {
    const path = input("path").value.trim();
    const option = [...choice.options].find((o) => o.value && o.value === path);
    choice.value = option ? option.value : "";
    describe(option);
  });
}
