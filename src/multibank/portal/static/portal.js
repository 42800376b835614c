// multibank portal: its one script, served by the portal itself (decision 0058).
// Copy buttons: a <button class="copy" data-copy="VALUE"> next to a key, an id or an IBAN puts
// VALUE on the clipboard; where the clipboard cannot be written (an http page on another
// host, a refused permission) the value's text is selected for Ctrl+C / Cmd+C instead.
// The buttons are rendered hidden, so a browser without scripts shows no dead button.
"use strict";
(function () {
  function select(button) {
    const target = button.previousElementSibling;
    if (!target) return;
    const range = document.createRange();
    range.selectNodeContents(target);
    const selection = window.getSelection();
    selection.removeAllRanges();
    selection.addRange(range);
  }

  function say(button, text) {
    button.textContent = text;
    window.setTimeout(function () { button.textContent = "Copy"; }, 2000);
  }

  document.addEventListener("click", function (event) {
    const button = event.target instanceof Element ? event.target.closest("button.copy") : null;
    if (!button) return;
    const value = button.getAttribute("data-copy") || "";
    const fallback = function () { select(button); say(button, "Selected: press Ctrl+C"); };
    if (!navigator.clipboard || !window.isSecureContext) { fallback(); return; }
    navigator.clipboard.writeText(value).then(function () { say(button, "Copied"); }, fallback);
  });

  for (const button of document.querySelectorAll("button.copy")) button.hidden = false;

  // Charts (decision 0070): the value of the bar under the pointer or with the focus is written
  // in the line under its chart.
  function show(event) {
    const bar = event.target instanceof Element ? event.target.closest("[data-value]") : null;
    const figure = bar ? bar.closest(".chart-figure") : null;
    const line = figure ? figure.querySelector(".chart-value") : null;
    if (line) line.textContent = bar.getAttribute("data-value");
  }
  document.addEventListener("mouseover", show);
  document.addEventListener("focusin", show);
})();
