// Copy buttons: a button with data-copy="<selector>" copies that element's text
// (a token shown only once, a ready-to-paste snippet) and says so for a moment.
for (const button of document.querySelectorAll("button[data-copy]")) {
  button.hidden = false;
  button.addEventListener("click", async () => {
    const source = document.querySelector(button.dataset.copy);
    if (!source) return;
    const label = button.textContent;
    try {
      await navigator.clipboard.writeText(source.textContent.trim());
      button.textContent = "Copied";
    } catch {
      // No clipboard (a page not served over HTTPS or localhost): select the
      // text so that Ctrl-C copies it.
      const range = document.createRange();
      range.selectNodeContents(source);
      const selection = window.getSelection();
      selection.removeAllRanges();
      selection.addRange(range);
      button.textContent = "Selected: press Ctrl-C";
    }
    setTimeout(() => { button.textContent = label; }, 2000);
  });
}
