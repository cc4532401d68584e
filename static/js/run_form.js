// The new-run / clone form: environment switch (its parameters and default reward),
// the preset's fields shown and overridable, reward components / judges / rubric
// dimensions added and removed from <template>s, and a live check (the server's own
// validation, errors per field, warnings that do not refuse the run, and for a clone
// the diff to the parent) as you type.

import { numberProblems } from "./form_numbers.js";
import { adviceItem, goToProblem, openAround, showProblems } from "./form_problems.js";
import { csrfToken, debounce, el, readJSONScript } from "./util.js";

const form = document.getElementById("run-form");
const presets = readJSONScript("presets-data") || {};
// component name -> the environments it reads facts of (null: any), when the page has it
const componentEnvs = readJSONScript("component-envs");
let rewardDirty = false;

// --- rows from templates ------------------------------------------------------------
function fromTemplate(selector, subs) {
  const tpl = typeof selector === "string" ? form.querySelector(selector) : selector;
  const frag = tpl.content.cloneNode(true);
  const replace = (s) => Object.entries(subs).reduce((acc, [k, v]) => acc.split(k).join(String(v)), s);
  for (const node of frag.querySelectorAll("*")) {
    for (const attr of [...node.attributes]) {
      if (attr.value.includes("__")) node.setAttribute(attr.name, replace(attr.value));
    }
  }
  return frag;
}

function nextIndex(container, selector) {
  const used = [...container.querySelectorAll(selector)].map((n) => Number(n.dataset.index));
  return used.length ? Math.max(...used) + 1 : 0;
}

function setParams(row, kind) {
  const box = row.querySelector("[data-params]");
  const tpl = form.querySelector(`template[data-params-for="${CSS.escape(kind)}"]`);
  box.replaceChildren();
  if (tpl) box.append(fromTemplate(tpl, { __i__: row.dataset.index }));
}

function addComponent() {
  const list = form.querySelector("[data-components]");
  const i = nextIndex(list, "[data-component-row]");
  list.append(fromTemplate("#tpl-component", { __i__: i }));
  const row = list.lastElementChild;
  const kind = row.querySelector("select[name$='.name']");
  orderComponents(row);
  setParams(row, kind.value);
  kind.focus();
}

function addDimension(judgeRow) {
  const list = judgeRow.querySelector("[data-dimensions]");
  const k = nextIndex(list, "[data-dimension-row]");
  list.append(fromTemplate("#tpl-dimension", { __i__: judgeRow.dataset.index, __k__: k }));
  return list.lastElementChild;
}

function addJudge() {
  const list = form.querySelector("[data-judges]");
  const i = nextIndex(list, "[data-judge-row]");
  list.append(fromTemplate("#tpl-judge", { __i__: i }));
  const row = list.lastElementChild;
  addDimension(row);
  row.querySelector("input")?.focus();
}

form.addEventListener("click", (e) => {
  const t = e.target instanceof Element ? e.target : null;
  if (!t) return;
  if (t.closest("[data-add-component]")) { addComponent(); rewardDirty = true; check(); }
  else if (t.closest("[data-add-judge]")) { addJudge(); rewardDirty = true; check(); }
  else if (t.closest("[data-add-dimension]")) { addDimension(t.closest("[data-judge-row]")).querySelector("input")?.focus(); check(); }
  else if (t.closest("[data-remove-row]")) {
    t.closest("[data-dimension-row], [data-component-row], [data-judge-row]")?.remove();
    rewardDirty = true;
    check();
  } else if (t.closest("[data-load-default-reward]")) loadReward(currentEnv());
});

// --- environment ----------------------------------------------------------------------
function currentEnv() {
  return form.querySelector("[data-env-radio]:checked")?.value || "calc";
}

// The component choices: the environment's own and those for any environment first;
// the others last, in a group that says they are not for it (the server refuses them).
function orderComponents(root) {
  if (!componentEnvs) return;
  const env = currentEnv();
  const fits = (name) => { const envs = componentEnvs[name]; return !envs || envs.includes(env); };
  for (const select of root.querySelectorAll("[data-component-row] select[name$='.name']")) {
    const options = [...select.querySelectorAll("option")];
    const chosen = select.value;
    const own = options.filter((o) => fits(o.value));
    const other = options.filter((o) => !fits(o.value));
    const groups = [];
    if (own.length) groups.push(el("optgroup", { label: `For ${env}` }, ...own));
    if (other.length) groups.push(el("optgroup", { label: `Not for ${env}` }, ...other));
    select.replaceChildren(...groups);
    select.value = chosen;
  }
}

// A blank name: the server names the run <env>-<preset>-<n> (services.auto_name).
function showNamePlaceholder() {
  const input = form.querySelector("[name='name']");
  if (input) input.placeholder = `blank: ${currentEnv()}-${currentPreset()}-N`;
}

async function loadReward(env) {
  const url = `${form.dataset.fragmentUrl}?env=${encodeURIComponent(env)}&preset=${encodeURIComponent(currentPreset())}`;
  const r = await fetch(url, { credentials: "same-origin" });
  if (!r.ok) return;
  const doc = new DOMParser().parseFromString(await r.text(), "text/html");
  const fresh = doc.querySelector("[data-reward-section]");
  const old = form.querySelector("[data-reward-section]");
  if (fresh && old) old.replaceWith(document.importNode(fresh, true));
  orderComponents(form);
  rewardDirty = false;
  check();
}

function onEnvChange() {
  const env = currentEnv();
  for (const box of form.querySelectorAll("[data-env-params]")) box.hidden = box.dataset.envParams !== env;
  showNamePlaceholder();
  orderComponents(form);
  const section = form.querySelector("[data-reward-section]");
  if (!rewardDirty) { loadReward(env); return; }
  section.querySelector("[data-reward-notice]")?.remove();
  section.prepend(el("p", { class: "error-summary small", "data-reward-notice": true },
    `The reward below was edited for ${section.dataset.env}. `,
    el("button", { type: "button", "data-load-default-reward": true, text: `Use the ${env} default reward` })));
}

// --- preset ---------------------------------------------------------------------------
function currentPreset() {
  return form.querySelector("[name='algorithm.preset']")?.value || "grpo";
}

function showPreset() {
  showNamePlaceholder();
  const fields = (presets[currentPreset()] || {}).fields || {};
  for (const row of form.querySelectorAll("[data-preset-row]")) {
    const name = row.dataset.presetRow;
    row.querySelector("[data-preset-value]").textContent = String(fields[name] ?? "");
    const input = form.querySelector(`[name='algorithm.${name}']`);
    const overridden = input && input.value !== "";
    row.querySelector("[data-preset-value]").classList.toggle("overridden", overridden);
    if (overridden) row.querySelector("[data-preset-value]").textContent = `${fields[name]} → ${input.value}`;
  }
  for (const field of form.querySelectorAll("[data-preset-field]")) {
    const v = String(fields[field.dataset.presetField] ?? "");
    const opt = field.querySelector("option[data-default-option]");
    if (opt) opt.textContent = `preset: ${v}`;
    const input = field.querySelector("input");
    if (input) input.placeholder = `preset: ${v}`;
  }
}

// --- LoRA: for a pretrained model; shown while model.path is set or any input is filled
// (the same rule as RunForm.lora_shown), so nothing typed is out of sight -----------------
function showLora() {
  const box = form.querySelector("[data-lora]");
  if (!box) return;
  const path = form.querySelector("[name='model.path']")?.value.trim() || "";
  const filled = [...box.querySelectorAll("input")].some((i) => i.value.trim() !== "");
  box.hidden = !(path || filled);
}

// --- the warm-start hint: a from-scratch model (no path) with no warm-start steps
// (the same rule as RunForm.warmstart_hint) --------------------------------------------
function showWarmstartHint() {
  const hint = form.querySelector("[data-warmstart-hint]");
  if (!hint) return;
  const path = form.querySelector("[name='model.path']")?.value.trim() || "";
  const steps = form.querySelector("[name='model.warmstart_steps']")?.value.trim() ?? "0";
  hint.hidden = Boolean(path) || !(steps === "" || steps === "0");
}

// --- live check -------------------------------------------------------------------------
const status = form.querySelector("[data-check-status]");
let checkSeq = 0;
let serverErrors = {};
let lastOk = false;

let serverWarnings = {};

const problemList = form.querySelector("[data-check-problems]");
const launch = form.querySelector("[data-launch]");
let problemCount = 0;
let refused = false; // a launch was refused here: said until no problem remains

const problems = (n) => `${n} problem${n === 1 ? "" : "s"}`;

function showStatus(ok, errors) {
  const n = ok ? 0 : Object.values(errors).reduce((a, m) => a + m.length, 0);
  refused = refused && n > 0;
  status.textContent = ok ? "✓ Valid configuration"
    : refused ? `Not launched: fix the ${problems(n)} listed below first.` : `${problems(n)} to fix${n ? ":" : ""}`;
  status.className = `small ${ok ? "check-ok" : "check-bad"}`;
  showProblems(form, problemList, ok ? {} : errors);
  problemCount = n;
  // Launch looks unavailable while a problem remains (the server refuses it too), and
  // says so to a screen reader; it stays clickable, so that a click or Enter is told
  // why and taken to the first problem (see the submit handler).
  launch.toggleAttribute("data-blocked", n > 0);
  launch.title = n ? `Fix the ${problems(n)} listed below first` : "";
  if (n) launch.setAttribute("aria-describedby", "check-status");
  else launch.removeAttribute("aria-describedby");
  const banner = form.querySelector("[data-error-summary]"); // a refused launch's
  if (banner) {
    const head = banner.querySelector("strong");
    if (n && head) head.textContent = refusedText(n);
    banner.hidden = !n && !banner.querySelector("ul");
  }
}

function goToLinked(e) {
  const link = e.target instanceof Element ? e.target.closest("[data-problem-for]") : null;
  if (!link) return;
  e.preventDefault();
  goToProblem(form, link.dataset.problemFor);
}
problemList?.addEventListener("click", goToLinked);
form.querySelector("[data-check-warnings]")?.addEventListener("click", goToLinked); // advice

const refusedText = (n) => `The run was not launched: fix the ${n} highlighted problem${n === 1 ? "" : "s"}.`;

/** A launch refused here, as the server refuses one (its banner, the first problem's
 *  field focused), with nothing sent. */
function refuse() {
  let banner = form.querySelector("[data-error-summary]");
  if (!banner) {
    banner = el("div", { class: "error-summary", role: "alert", "data-error-summary": "" }, el("strong"));
    form.querySelector(".form-layout").before(banner);
  }
  banner.querySelector("strong").textContent = refusedText(problemCount);
  banner.hidden = false;
  refused = true;
  status.textContent = `Not launched: fix the ${problems(problemCount)} listed below first.`;
  const first = problemList?.querySelector("[data-problem-for]");
  if (first) goToProblem(form, first.dataset.problemFor);
}

/** Advice that does not refuse the run (path -> [message]): beside its field and in
 *  the side panel, the field's name first. */
function showWarnings(warnings) {
  for (const node of form.querySelectorAll("[data-warning-for]")) node.remove();
  const panel = form.querySelector("[data-check-warnings]");
  const items = [];
  for (const [path, messages] of Object.entries(warnings || {})) {
    const errors = form.querySelector(`[data-errors-for="${CSS.escape(path)}"]`);
    for (const m of messages) {
      errors?.after(el("p", { class: "small sev-warning", "data-warning-for": path, text: `⚠ ${m}` }));
      items.push(adviceItem(form, path, m));
    }
  }
  if (panel) {
    panel.replaceChildren(...items);
    panel.hidden = items.length === 0;
  }
}

/** Show the last server answer with this browser's own number problems on top (they
 *  appear at once, before the server has answered). */
function showAll(serverOk) {
  const local = numberProblems(form);
  const errors = { ...serverErrors, ...local };
  showErrors(errors);
  showStatus(serverOk && Object.keys(local).length === 0, errors);
  return errors;
}

// Fields with an error at the last showing: a field whose error is new opens the folded
// sections around it (the optimiser's, say), so that no problem is out of sight; one
// folded again while its error stays is left folded.
let shownErrors = new Set();

function showErrors(errors) {
  for (const ul of form.querySelectorAll("[data-errors-for]")) ul.replaceChildren();
  for (const f of form.querySelectorAll(".field.has-error")) f.classList.remove("has-error");
  for (const f of form.querySelectorAll("[aria-invalid]")) f.removeAttribute("aria-invalid");
  const orphans = [];
  const shown = new Set();
  for (const [path, messages] of Object.entries(errors)) {
    const ul = form.querySelector(`[data-errors-for="${CSS.escape(path)}"]`);
    if (!ul) { orphans.push(...messages); continue; }
    for (const m of messages) ul.append(el("li", { text: m }));
    const field = ul.closest(".field");
    field?.classList.add("has-error");
    field?.querySelector("input, select, textarea")?.setAttribute("aria-invalid", "true");
    shown.add(path);
    if (!shownErrors.has(path)) {
      for (let box = ul.closest("details"); box; box = box.parentElement?.closest("details")) box.open = true;
    }
  }
  shownErrors = shown;
  return orphans;
}

/** One value of the diff, as templates/pages/partials/config_value.html writes it:
 * a long one (over 100 characters) shows its first 79 and "…", and opens whole. */
function valueBox(value) {
  const v = String(value ?? "");
  const chars = [...v]; // characters, as Python counts them
  if (chars.length <= 100) return el("div", { class: "config-value" }, v);
  const summary = el("summary", { title: v },
    el("span", { class: "cut", text: `${chars.slice(0, 79).join("")}…` }), " ",
    el("span", { class: "more", text: `${chars.length} characters` }));
  return el("div", { class: "config-value" },
    el("details", { class: "long-value", "data-long-value": "" }, summary, el("div", { class: "whole", text: v })));
}

/** The changes from the parent, one a row as new.html writes them: the field's path on
 * a line of its own (breaking at its dots), then "parent → this run" beneath it. */
function showDiff(diff) {
  const list = form.querySelector("[data-diff]");
  if (!list) return;
  const side = (cls, who, value) => el("div", { class: cls }, el("span", { class: "sr-only", text: `${who}: ` }), valueBox(value));
  const rows = diff.map((d) => el("div", { class: "diff-row", "data-diff-row": "" },
    el("dt", { class: "diff-path" }, ...d.path.split(".").flatMap((p, i, all) => (i < all.length - 1 ? [`${p}.`, el("wbr")] : [p]))),
    el("dd", { class: "diff-values" }, side("old", "parent", d.parent), " ",
      el("span", { class: "arrow", "aria-hidden": "true", text: "→" }), " ", side("new", "this run", d.value))));
  list.replaceChildren(...rows);
  list.hidden = diff.length === 0;
  form.querySelector("[data-diff-empty]").hidden = diff.length > 0;
}

// The form as last changed (``asked``) and as the last answer saw it (``answered``):
// equal, that answer is the form's.
let asked = 1;
let answered = 0;

async function runCheck() {
  const seq = ++checkSeq;
  const version = asked;
  const body = new FormData(form);
  let res;
  try {
    const r = await fetch(form.dataset.checkUrl, { method: "POST", body, credentials: "same-origin", headers: { "X-CSRFToken": csrfToken() } });
    if (!r.ok) return;
    res = await r.json();
  } catch {
    return;
  }
  if (seq !== checkSeq) return; // a newer check is on its way
  answered = version;
  serverErrors = res.errors;
  serverWarnings = res.warnings || {};
  lastOk = res.ok;
  showAll(res.ok);
  showWarnings(serverWarnings);
  if (res.ok || res.diff.length) showDiff(res.diff);
  const estimate = form.querySelector("[data-estimate]");
  if (estimate) estimate.textContent = res.estimate || "";
  form.dataset.checked = String(seq);
}
const checkSoon = debounce(runCheck, 350);
function check() {
  asked += 1;
  checkSoon();
}

form.addEventListener("input", (e) => {
  if (e.target instanceof Element && e.target.closest("[data-reward-section]")) rewardDirty = true;
  if (e.target instanceof Element && e.target.matches("[name^='algorithm.']")) showPreset();
  if (e.target instanceof Element && e.target.matches("[name='model.path'], [data-lora] input")) showLora();
  if (e.target instanceof Element && e.target.matches("[name='model.path'], [name='model.warmstart_steps']")) {
    showWarmstartHint();
  }
  if (e.target instanceof Element && e.target.matches("input[data-number]")) {
    delete serverErrors[e.target.name]; // answered about the old text
    showAll(lastOk);
  }
  check();
});
form.addEventListener("change", (e) => {
  const t = e.target;
  if (!(t instanceof Element)) return;
  if (t.matches("[data-env-radio]")) onEnvChange();
  else if (t.matches("[name='algorithm.preset']") || t.matches("[name^='algorithm.']")) showPreset();
  else if (t.matches("[data-component-row] select[name$='.name']")) setParams(t.closest("[data-component-row]"), t.value);
  if (t.closest("[data-reward-section]")) rewardDirty = true;
  check();
});
// Launch: refused here while a problem remains, as the server would refuse it (say
// why at once, nothing sent); a form changed since the last check is checked first.
// A check that does not answer leaves it to the server, which decides in any case.
let launching = false; // checking before a launch
let sending = false; // checked: this submit goes to the server
form.addEventListener("submit", async (e) => {
  if (sending) { launch.disabled = true; return; }
  if (launching) { e.preventDefault(); return; }
  if (Object.keys(numberProblems(form)).length) {
    e.preventDefault(); // the server would refuse it too; say why here, at once
    showAll(false);
    refuse();
    return;
  }
  if (answered !== asked) {
    e.preventDefault();
    launching = true;
    status.textContent = "Checking…";
    await runCheck();
    launching = false;
    if (answered === asked && problemCount) { refuse(); return; }
    sending = true;
    form.requestSubmit(launch);
    sending = false;
    return;
  }
  if (problemCount) {
    e.preventDefault();
    refuse();
    return;
  }
  launch.disabled = true; // no double launch
});

showPreset();
orderComponents(form);
// Refused by the server: the first field it names gets the focus (its folded
// sections open), so the problem is in view, not a page's length below the banner.
if (form.querySelector("[data-error-summary]")) {
  const first = form.querySelector("[aria-invalid='true']");
  openAround(first);
  first?.focus();
  // Its problems listed in the side panel at once, as the page shows them.
  serverErrors = Object.fromEntries([...form.querySelectorAll("[data-errors-for]")]
    .filter((ul) => ul.children.length)
    .map((ul) => [ul.dataset.errorsFor, [...ul.children].map((li) => li.textContent)]));
  showAll(false);
}
runCheck();
