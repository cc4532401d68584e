// Runs list and home: tick runs to compare (2 to 8), then open /compare/?runs=a,b.

const boxes = () => [...document.querySelectorAll("[data-compare-box]")];
const button = document.querySelector("[data-compare-button]");
const count = document.querySelector("[data-compare-count]");
const form = document.getElementById("compare-form");

function update() {
  const chosen = boxes().filter((b) => b.checked);
  if (count) count.textContent = String(chosen.length);
  if (button) button.disabled = chosen.length < 2 || chosen.length > 8;
  for (const b of boxes()) b.closest("tr")?.classList.toggle("selected", b.checked);
}

document.addEventListener("change", (e) => {
  if (e.target instanceof HTMLInputElement && e.target.matches("[data-compare-box]")) update();
});

form?.addEventListener("submit", (e) => {
  e.preventDefault();
  const ids = [...new Set(boxes().filter((b) => b.checked).map((b) => b.value))];
  window.location.href = `${form.action}?runs=${ids.map(encodeURIComponent).join(",")}`;
});

// x toggles the focused row's checkbox (j/k move between rows, see base.js).
document.addEventListener("keydown", (e) => {
  if (e.key !== "x" || e.ctrlKey || e.metaKey || e.altKey) return;
  const row = document.activeElement?.closest?.("[data-nav-item]");
  const box = row?.querySelector("[data-compare-box]");
  if (box) {
    box.checked = !box.checked;
    update();
    e.preventDefault();
  }
});
update();
