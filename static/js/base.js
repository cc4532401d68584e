// Every page: keyboard shortcuts (/, j/k, Enter, [ ], g r, g n, ?), auto-submitting
// filter forms. Items a list lets you move through carry data-nav-item; the link a
// press of Enter follows carries data-nav-link.

const typing = (e) => {
  const t = e.target;
  return t instanceof HTMLElement && (t.isContentEditable || ["INPUT", "TEXTAREA", "SELECT"].includes(t.tagName));
};

function navItems() {
  return [...document.querySelectorAll("[data-nav-item]")].filter((n) => n.offsetParent !== null);
}

function move(delta) {
  const items = navItems();
  if (!items.length) return false;
  const current = items.findIndex((n) => n === document.activeElement || n.contains(document.activeElement));
  const next = current < 0 ? (delta > 0 ? 0 : items.length - 1) : Math.min(items.length - 1, Math.max(0, current + delta));
  const item = items[next];
  const target = item.matches("a, button, input") ? item : item.querySelector("[data-nav-link]") || item;
  if (!target.hasAttribute("tabindex") && !target.matches("a, button, input")) target.setAttribute("tabindex", "-1");
  target.focus();
  target.scrollIntoView({ block: "nearest" });
  items.forEach((n) => n.classList.toggle("current", n === item));
  return true;
}

function follow(selector) {
  const link = document.querySelector(selector);
  if (link && link.href) {
    window.location.href = link.href;
    return true;
  }
  return false;
}

// The pop-over menus (Export…, Cancel run…) are <details>: Escape closes an open
// one, focus back on its button, as a menu does.
const MENUS = "details[open].export-menu, details[open].cancel-confirm";

function closeMenus() {
  const open = [...document.querySelectorAll(MENUS)];
  for (const d of open) {
    d.open = false;
    d.querySelector("summary")?.focus();
  }
  return open.length > 0;
}

let pendingG = false;
document.addEventListener("keydown", (e) => {
  if (e.defaultPrevented || e.ctrlKey || e.metaKey || e.altKey) return;
  if (e.key === "Escape" && closeMenus()) {
    e.preventDefault();
    return;
  }
  if (e.key === "Escape" && typing(e)) {
    e.target.blur();
    return;
  }
  if (typing(e)) return;
  if (pendingG) {
    pendingG = false;
    if (e.key === "r") { window.location.href = "/runs/"; return; }
    if (e.key === "n") { window.location.href = "/runs/new/"; return; }
  }
  switch (e.key) {
    case "/": {
      const f = document.querySelector("[data-filter]");
      if (f) { e.preventDefault(); f.focus(); f.select?.(); }
      break;
    }
    case "j":
      if (move(1) || follow("[data-next-item]")) e.preventDefault();
      break;
    case "k":
      if (move(-1) || follow("[data-prev-item]")) e.preventDefault();
      break;
    case "]":
      if (follow("[data-next-step]") || follow("[data-next-item]")) e.preventDefault();
      break;
    case "[":
      if (follow("[data-prev-step]") || follow("[data-prev-item]")) e.preventDefault();
      break;
    case "g":
      pendingG = true;
      setTimeout(() => { pendingG = false; }, 1200);
      break;
    case "?": {
      const d = document.getElementById("shortcuts");
      if (d && !d.open) d.showModal();
      break;
    }
    default:
  }
});

document.addEventListener("click", (e) => {
  const b = e.target instanceof Element && e.target.closest("[data-shortcuts]");
  if (b) document.getElementById("shortcuts")?.showModal();
});

// Filter forms: selects submit on change; text inputs on Enter (native).
for (const form of document.querySelectorAll("form[data-autosubmit]")) {
  form.addEventListener("change", (e) => {
    if (e.target instanceof HTMLSelectElement) form.requestSubmit();
  });
}
for (const sel of document.querySelectorAll("select[data-autosubmit-select]")) {
  sel.addEventListener("change", () => sel.form?.requestSubmit());
}
