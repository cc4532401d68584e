// The new-run form's model picker: "Use" on a model found under the model roots puts
// its path relative to its root into model.path (blank: a built-in size), then the live
// check runs.

const form = document.getElementById("run-form");

form?.addEventListener("click", (e) => {
  const button = e.target instanceof Element ? e.target.closest("[data-model-pick]") : null;
  if (!button) return;
  const input = form.querySelector("[name='model.path']");
  if (!input) return;
  input.value = button.dataset.modelPick;
  input.dispatchEvent(new Event("input", { bubbles: true }));
  for (const b of form.querySelectorAll("[data-model-pick]")) b.setAttribute("aria-pressed", String(b === button));
});
