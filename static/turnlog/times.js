// Exact instants (templates/sessions/_time.html): the server writes the UTC instant into each time's
// tooltip; this fills in the viewer's local time beside it, for times in the page and for times that
// arrive later (live frames, htmx swaps), which a MutationObserver sees whatever swapped them in.
(function () {
  "use strict";

  function pad(n) { return (n < 10 ? "0" : "") + n; }

  function localWords(date) {
    var offset = -date.getTimezoneOffset();
    var sign = offset < 0 ? "-" : "+";
    var abs = Math.abs(offset);
    var zone = "";
    try { zone = Intl.DateTimeFormat().resolvedOptions().timeZone || ""; } catch (e) { zone = ""; }
    return date.getFullYear() + "-" + pad(date.getMonth() + 1) + "-" + pad(date.getDate()) + " " +
      pad(date.getHours()) + ":" + pad(date.getMinutes()) + ":" + pad(date.getSeconds()) +
      " your time (" + (zone ? zone + ", " : "") + "UTC" + sign + pad(Math.floor(abs / 60)) + ":" + pad(abs % 60) + ")";
  }

  function fill(root) {
    if (!root.querySelectorAll) return;
    var found = Array.prototype.slice.call(root.querySelectorAll(".when"));
    if (root.matches && root.matches(".when")) found.push(root);
    found.forEach(function (when) {
      var time = when.querySelector("time[datetime]");
      var local = when.querySelector(".time-local");
      if (!time || !local) return;
      var date = new Date(time.getAttribute("datetime"));
      if (isNaN(date)) return;
      var words = localWords(date);
      if (local.textContent !== words) local.textContent = words;
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    fill(document);
    new MutationObserver(function (records) {
      records.forEach(function (record) {
        record.addedNodes.forEach(function (node) { if (node.nodeType === 1) fill(node); });
      });
    }).observe(document.body, { childList: true, subtree: true });
  });
})();
