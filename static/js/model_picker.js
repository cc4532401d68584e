// The new-run form's model picker: "Use" on a model found under the model roots puts
// its path relative to its root into model.path (blank: a built-in size), then the live
// check runs. A form that opened on the built-in model has warm-start steps filled in
// for it (a model from scratch needs them, RunForm.warmstart_hint); a pretrained model
// does not, so picking one sets them to 0 unless they were edited, and picking the
// built-in model again gives them back.

const form = document.getElementById("run-form");

form?.addEventListener("click", (e) => {
  const button = e.target instanceof Element ? e.target.closest("[data-model-pick]") : null;
  if (!button) return;
  const input = form.querySelector("[name='model.path']");
  if (!input) return;
  input.value = button.dataset.modelPick;
  input.dispatchEvent(new Event("input", { bubbles: true }));
  warmStartFor(input);
  for (const b of form.querySelectorAll("[data-model-pick]")) b.setAttribute("aria-pressed", String(b === button));
});

function warmStartFor(input) {
  const warm = form.querySelector("[name='model.warmstart_steps']");
  if (!warm || input.defaultValue.trim() !== "") return; // opened on a pretrained model
  let value = null;
  if (input.value && warm.value === warm.defaultValue && warm.defaultValue !== "0") {
    value = "0";
    warm.dataset.pickedAway = "true";
  } else if (!input.value && warm.dataset.pickedAway && warm.value === "0") {
    value = warm.defaultValue;
    delete warm.dataset.pickedAway;
  }
  if (value === null) return;
  warm.value = value;
  warm.dispatchEvent(new Event("input", { bubbles: true }));
}
