// The run form's numbers, checked here as typed (static/js/run_form.js), by the same
// rule as the server's (dashboard/pages/formfields.py number_problem): a number input
// is a text input (type="number" submits "" for text it cannot read, and the default
// would then launch unseen).

const FLOAT = /^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/;
const INT = /^[+-]?\d+$/;
const MAX_DIGITS = 18; // typednumbers.MAX_DIGITS

function numberProblem(input) {
  const raw = input.value.trim();
  if (raw === "") return input.hasAttribute("data-default") ? `Enter a number (the default is ${input.dataset.default})` : null;
  const words = (input.dataset.words || "").split(" ").filter(Boolean); // record.groups: "auto"
  if (words.includes(raw)) return null;
  const shown = raw.length <= 40 ? raw : `${raw.slice(0, 20)}…`;
  if (input.dataset.number === "int") {
    if (!INT.test(raw)) return `“${shown}” is not a whole number${words.map((w) => ` or “${w}”`).join("")}`;
    return raw.replace(/^[+-]/, "").length > MAX_DIGITS ? `“${shown}” is too large (${MAX_DIGITS} digits at most)` : null;
  }
  if (!FLOAT.test(raw)) return `“${shown}” is not a number`;
  if (!Number.isFinite(Number(raw))) return `“${shown}” is too large to be a number`;
  return null;
}

/** path -> [message] for every visible number input of ``form`` whose text is not a
 *  number. */
export function numberProblems(form) {
  const out = {};
  for (const input of form.querySelectorAll("input[data-number]")) {
    if (input.closest("[hidden]")) continue; // another environment's parameters
    const problem = numberProblem(input);
    if (problem) out[input.name] = [problem];
  }
  return out;
}
