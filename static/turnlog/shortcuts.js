// Keyboard shortcuts (the dialog in templates/_shortcuts.html lists them; docs/guide/sessions.md too).
// j / k: next / previous turn; o: open or close the focused card's details; /: the search box;
// t: the timeline; l: the ledger; ?: this list. Never inside a field, never with Ctrl, Alt or Meta.
(function () {
  "use strict";

  function inField(target) {
    if (!target || !target.closest) return false;
    return Boolean(target.closest("input, textarea, select, [contenteditable]:not([contenteditable=false])"));
  }

  // Focus moved by a shortcut lands on an element made focusable for it, and is scrolled into view.
  function focusOn(el) {
    if (!el.hasAttribute("tabindex") && !el.matches("a[href], button, summary, input, select, textarea")) el.setAttribute("tabindex", "-1");
    el.focus({ preventScroll: true });
    el.scrollIntoView({ block: "start" });
  }

  function turnHeads() {
    return Array.prototype.slice.call(document.querySelectorAll("#blocks .turn-head"));
  }

  // The turn after (step 1) or before (step -1) the one holding focus; with focus outside every turn,
  // the first turn below the top of the window, or the last above it.
  function moveTurn(step) {
    var heads = turnHeads();
    if (!heads.length) return false;
    var current = document.activeElement && document.activeElement.closest ? document.activeElement.closest(".block.turn") : null;
    var index = current ? heads.indexOf(current.querySelector(".turn-head")) : -1;
    var next;
    if (index >= 0) {
      next = heads[Math.min(heads.length - 1, Math.max(0, index + step))];
    } else {
      var top = document.querySelector(".topbar") ? document.querySelector(".topbar").getBoundingClientRect().bottom : 0;
      var below = heads.filter(function (head) { return head.getBoundingClientRect().top > top + 1; });
      var above = heads.filter(function (head) { return head.getBoundingClientRect().top <= top + 1; });
      next = step > 0 ? below[0] || heads[heads.length - 1] : above[above.length - 1] || heads[0];
    }
    focusOn(next);
    return true;
  }

  // The details the focus is in, else the first one of the focused card (a tool card, an event, a turn).
  function toggleCard() {
    var active = document.activeElement;
    if (!active || active === document.body) return false;
    var details = active.closest("details");
    if (!details) {
      var card = active.closest(".card, .row, .block, .ledger-row");
      details = card && card.querySelector("details");
    }
    if (!details) return false;
    details.open = !details.open;
    var summary = details.querySelector("summary");
    if (summary) summary.focus({ preventScroll: true });
    return true;
  }

  function focusSearch() {
    var box = document.querySelector("main input[type=search]");
    if (box) { box.focus(); box.select(); return true; }
    var home = document.querySelector(".topbar .brand");
    if (!home) return false;
    window.location.assign(home.getAttribute("href") + "#q");  // the session list's search box
    return true;
  }

  function follow(selector) {
    var link = document.querySelector(selector);
    if (!link) return false;
    link.click();
    return true;
  }

  function showLedger() {
    var ledger = document.getElementById("ledger-panel");
    if (!ledger) return false;
    focusOn(ledger);
    return true;
  }

  function showHelp() {
    var dialog = document.getElementById("shortcuts");
    if (!dialog || dialog.open) return false;
    dialog.showModal();
    return true;
  }

  var ACTIONS = {
    j: function () { return moveTurn(1); },
    k: function () { return moveTurn(-1); },
    o: toggleCard,
    "/": focusSearch,
    t: function () { return follow('a[data-shortcut="t"]'); },
    l: showLedger,
    "?": showHelp,
  };

  document.addEventListener("keydown", function (event) {
    if (event.defaultPrevented || event.ctrlKey || event.altKey || event.metaKey || event.isComposing) return;
    if (inField(event.target)) return;
    var dialog = document.getElementById("shortcuts");
    if (dialog && dialog.open) return;  // the dialog has the keyboard until it closes (Escape or Close)
    var action = Object.prototype.hasOwnProperty.call(ACTIONS, event.key) && ACTIONS[event.key];
    if (action && action()) event.preventDefault();
  });

  document.addEventListener("DOMContentLoaded", function () {
    // Arriving from "/" on another page: the list's search box takes the focus.
    if (window.location.hash === "#q") {
      var box = document.getElementById("q");
      if (box && box.matches("input")) box.focus();
    }
  });
})();
