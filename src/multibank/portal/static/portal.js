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

  // Money fields (decision 0071): typed in major units; the line under the field says the
  // minor-unit value sent, as the server reads it (ASCII digits, thousands commas, the
  // currency's own number of decimals).
  const odd = JSON.parse(document.body.getAttribute("data-exponents") || "{}");
  function minor(input) {
    const named = input.getAttribute("data-currency-field");
    const field = named && input.form ? input.form.elements.namedItem(named) : null;
    const currency = (field && "value" in field ? field.value : input.getAttribute("data-currency") || "").trim().toUpperCase();
    const exponent = currency in odd ? odd[currency] : 2;
    const text = input.value.trim().replace(/ /g, "");
    const match = /^(-?)([0-9]{1,3}(?:,[0-9]{3})+|[0-9]{1,20})(?:\.([0-9]{1,20}))?$/.exec(text);
    if (!match) return "not an amount in " + currency;
    const decimals = match[3] || "";
    if (decimals.length > exponent) return currency + " has " + exponent + " decimals";
    const digits = (match[2].replace(/,/g, "") + decimals.padEnd(exponent, "0")).replace(/^0+(?=[0-9])/, "");
    const grouped = digits.replace(/\B(?=([0-9]{3})+$)/g, ",");
    return "= " + match[1] + grouped + " minor units of " + currency;
  }
  function update(input) {
    const line = input.parentElement ? input.parentElement.querySelector("small.minor") : null;
    if (line) line.textContent = minor(input);
  }
  document.addEventListener("input", function (event) {
    const target = event.target;
    if (!(target instanceof Element)) return;
    if (target.matches("input.major")) update(target);
    const form = target.closest("form");
    if (form) for (const input of form.querySelectorAll("input.major[data-currency-field]")) update(input);
  });
  document.addEventListener("focusin", show);
})();
