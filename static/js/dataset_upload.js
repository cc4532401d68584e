// The dataset upload form (templates/pages/datasets.html). What the browser can check
// is checked before anything is sent (a file chosen, its extension, its size; the
// name's and the field keys' rules, worded as the server words them:
// dashboard/library/datasets.py). Then the form is sent with fetch, so that a refusal
// (a bad line, a name taken) leaves the page, and the chosen file, as they are: the
// problems are shown in the summary and beside the field each names. An answer that
// is not the server's JSON (a proxy's error page) sends the form again as a plain
// form, whose page says what happened. File names and messages are untrusted: they
// reach the page through textContent only (el()).

import { csrfToken, el } from "./util.js";

const form = document.querySelector("[data-upload-form]");
const summary = document.querySelector("[data-upload-errors]");
// As the server names them in a message (dashboard/pages/datasets.py LABELS).
const LABELS = { file: "file", name: "name", prompt_key: "Prompt field", answer_key: "Answer field" };
const KEY = /^[A-Za-z0-9_.-]{1,64}$/;
// Control characters, and format characters that reorder or hide text (as the server).
const CONTROL = /[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ufeff]/u;

const field = (name) => form.querySelector(`[name="${name}"]`);

function extension(name) {
  const dot = name.lastIndexOf(".");
  return dot > 0 ? name.slice(dot).toLowerCase() : "";
}

/** ``{field: [message]}`` for what this browser can tell is wrong before sending. */
function localProblems() {
  const out = {};
  const add = (name, message) => (out[name] ||= []).push(message);
  const input = field("file");
  const file = input.files && input.files[0];
  const accepted = input.accept.split(",").filter(Boolean);
  if (!file) add("file", "choose a file to upload");
  const typed = field("name").value.trim();
  let ext = file ? extension(file.name) : "";
  let stem = typed || (file ? file.name : "");
  if (typed && accepted.includes(extension(typed))) ext = extension(typed);
  if (typed && accepted.includes(extension(typed))) stem = typed.slice(0, -ext.length);
  else if (!typed && ext) stem = stem.slice(0, -ext.length);
  if (file && !accepted.includes(ext)) add("file", `must be one of ${accepted.join(", ")} (this one is ${ext || "none"})`);
  const limit = Number(form.dataset.limit);
  if (file && limit && file.size > limit) {
    add("file", `the upload is larger than the limit of ${form.dataset.limitText} (DATASET_MAX_UPLOAD_BYTES)`);
  }
  if (/[/\\]/.test(stem) || CONTROL.test(stem)) add("name", "no path separators (/ or \\) or control characters in a name");
  else if ((typed || file) && !/[\p{L}\p{N}]/u.test(stem)) add("name", "give the dataset a name with letters or digits");
  for (const key of ["prompt_key", "answer_key"]) {
    if (!KEY.test(field(key).value)) add(key, "letters, digits, '_', '.' or '-' (1 to 64)");
  }
  return out;
}

function clearField(name) {
  const list = form.querySelector(`[data-errors-for="${name}"]`);
  list?.replaceChildren();
  list?.closest(".field")?.classList.remove("has-error");
  field(name)?.removeAttribute("aria-invalid");
}

/** The summary (``lines``: each problem with its field named) and each field's own. */
function show(lines, fields) {
  for (const name of Object.keys(LABELS)) clearField(name);
  summary.querySelector("[data-choose-again]")?.remove(); // the file is still chosen
  summary.querySelector("ul").replaceChildren(...lines.map((line) => el("li", { text: line })));
  summary.hidden = lines.length === 0;
  let first = null;
  for (const [name, messages] of Object.entries(fields)) {
    const list = form.querySelector(`[data-errors-for="${name}"]`);
    if (!list) continue;
    list.replaceChildren(...messages.map((m) => el("li", { text: m })));
    list.closest(".field")?.classList.add("has-error");
    field(name)?.setAttribute("aria-invalid", "true");
    first ||= field(name);
  }
  first?.focus();
}

const labelled = (fields) => Object.entries(fields).flatMap(([name, messages]) => messages.map((m) => `${LABELS[name]}: ${m}`));

let sending = false;
form?.addEventListener("submit", async (e) => {
  e.preventDefault();
  if (sending) return;
  const local = localProblems();
  if (Object.keys(local).length) {
    show(labelled(local), local);
    return;
  }
  const button = form.querySelector("[data-upload-submit]");
  sending = true;
  button.disabled = true;
  button.textContent = "Uploading…";
  let answer = null;
  try {
    const r = await fetch(form.action || location.href, {
      method: "POST",
      body: new FormData(form),
      credentials: "same-origin",
      headers: { Accept: "application/json", "X-CSRFToken": csrfToken() },
    });
    if ((r.headers.get("Content-Type") || "").startsWith("application/json")) answer = await r.json();
  } catch {
    answer = { errors: ["The upload did not reach the server (the connection failed); try again."], fields: {} };
  }
  sending = false;
  button.disabled = false;
  button.textContent = "Upload";
  if (answer === null) {
    HTMLFormElement.prototype.submit.call(form); // not the server's JSON: its own page says why
    return;
  }
  if (answer.url) {
    location.assign(answer.url);
    return;
  }
  const { "": general = [], ...fields } = answer.fields || {};
  show(answer.errors || general, fields);
});

for (const name of Object.keys(LABELS)) {
  field(name)?.addEventListener(name === "file" ? "change" : "input", () => clearField(name));
}
