// Turnlog's little script: relative times, live elapsed timers, and the
// websocket cursor (reconnects ask for ?after=<last seq shown>).
(function () {
  "use strict";

  function relative(date) {
    var seconds = Math.round((Date.now() - date.getTime()) / 1000);
    var future = seconds < 0;
    seconds = Math.abs(seconds);
    var text;
    if (seconds < 5) return "just now";
    if (seconds < 60) text = seconds + " s";
    else if (seconds < 3600) text = Math.floor(seconds / 60) + " min";
    else if (seconds < 86400) text = Math.floor(seconds / 3600) + " h";
    else text = Math.floor(seconds / 86400) + " d";
    return future ? "in " + text : text + " ago";
  }

  function elapsed(since) {
    var seconds = Math.max(0, Math.round((Date.now() - since.getTime()) / 1000));
    if (seconds < 60) return "running " + seconds + " s";
    if (seconds < 3600) return "running " + Math.floor(seconds / 60) + " min " + (seconds % 60) + " s";
    return "running " + Math.floor(seconds / 3600) + " h " + Math.floor((seconds % 3600) / 60) + " min";
  }

  function refreshTimes(root) {
    (root || document).querySelectorAll("time[data-relative]").forEach(function (el) {
      var date = new Date(el.getAttribute("datetime"));
      if (!isNaN(date)) el.textContent = relative(date);
    });
    (root || document).querySelectorAll(".elapsed[data-since]").forEach(function (el) {
      var date = new Date(el.getAttribute("data-since"));
      if (!isNaN(date)) el.textContent = elapsed(date);
    });
  }

  // The live cursor: frames update #live-cursor; a reconnect resumes after it.
  function lastSeq() {
    var cursor = document.getElementById("live-cursor");
    return cursor ? cursor.getAttribute("data-last-seq") : null;
  }

  // A live frame replaces whole blocks and rows. Each <details> keeps the state
  // the reader left it in (found again by its nearest id and its place under it).
  // Anything else is as a reload renders it: a block a new summary compacts
  // collapses, unless it holds something the reader opened, which stays in view.
  // A block or step re-read comes as its shell, then its parts in later swaps: the
  // state of what the shell left out waits in leftBehind for the part that brings it back.
  var leftBehind = {};  // place -> open
  var newlyCompacted = new WeakSet();  // compacted details a shell just brought, until a part opens them

  function detailsByPlace(root) {
    var found = {};
    root.querySelectorAll("details").forEach(function (el) {
      var owner = el.parentElement && el.parentElement.closest("[id]");
      var place = (owner ? owner.id : "") + "|" + el.className;
      var n = 0;
      while (found[place + "|" + n]) n++;
      found[place + "|" + n] = { el: el, owner: owner ? owner.id : "" };
    });
    return found;
  }

  // removed: the elements the swap takes away (the target itself when the fragment replaces it).
  function keepReadersDetails(target, fragment, removed) {
    var before = detailsByPlace(target);
    removed.forEach(function (el) { Object.assign(before, detailsByPlace(el)); });
    var after = detailsByPlace(fragment);
    var openedByReader = [];
    Object.keys(after).forEach(function (place) {
      var shown = after[place];
      var open = before[place] ? before[place].el.open : leftBehind[place];
      delete leftBehind[place];
      if (open === undefined) return;
      if (open && !shown.el.open) openedByReader.push(shown.el);
      shown.el.open = open;
    });
    removed.forEach(function (el) {
      Object.keys(detailsByPlace(el)).forEach(function (place) {
        if (!after[place]) leftBehind[place] = before[place].el.open;
      });
    });
    Object.keys(after).forEach(function (place) {
      var shown = after[place];
      if (before[place] || !shown.el.classList.contains("compacted")) return;
      if (openedByReader.some(function (el) { return shown.el.contains(el); })) {
        shown.el.open = true;  // newly compacted around what the reader is reading
      } else {
        newlyCompacted.add(shown.el);
      }
    });
    var around = target.closest && target.closest("details.compacted");
    if (around && newlyCompacted.has(around) && openedByReader.length) {
      around.open = true;  // a part put back into a block newly compacted holds what the reader opened
      newlyCompacted.delete(around);
    }
  }

  function setLiveState(text, state) {
    var el = document.getElementById("live-state");
    if (el) { el.textContent = text; el.setAttribute("data-state", state); }
  }

  if (window.htmx) {
    // Reconnect soon after a server restart, but back off to at most ~10 s.
    htmx.config.wsReconnectDelay = function (retryCount) {
      return Math.min(500 * Math.pow(2, retryCount), 10000) * (0.5 + Math.random() / 2);
    };
    // Deferred scripts run in order, so htmx and its ws extension are defined here.
    var create = htmx.createWebSocket;
    // The socket is also told the state the header shows: one that changed meanwhile is re-sent.
    htmx.createWebSocket = function (url) {
      var seq = lastSeq();
      var head = document.getElementById("session-head");
      var state = head && head.getAttribute("data-state");
      var withCursor = new URL(url);
      if (seq !== null && Number(seq) >= 0) withCursor.searchParams.set("after", seq);
      if (state) withCursor.searchParams.set("state", state);
      // What changed beside the log since the page (or the socket's last join) read it is caught up from this instant.
      var seen = document.getElementById("live-seen");
      var seenAt = seen && seen.getAttribute("data-seen-at");
      if (seenAt) withCursor.searchParams.set("seen_at", seenAt);
      url = withCursor.toString();
      return create ? create(url) : new WebSocket(url);
    };
  }

  // The server asks a page to come back with close codes in the range Daphne
  // lets it send (dashboard/consumers.py): 4012 renewal, 4500 server error,
  // 4503 database unavailable. htmx's ws extension reconnects by itself only
  // after 1006, 1011, 1012 and 1013, so these are reconnected here, with the
  // same backoff; createWebSocket above resumes from the cursor.
  var RECONNECT_CODES = [4012, 4500, 4503];
  var GONE_TEXT = "Deleted: this session no longer exists";
  var HTMX_RECONNECT_CODES = [1006, 1011, 1012, 1013];
  var reconnects = new WeakMap();  // socket element -> reconnects since it was last open

  function reconnectAfter(socketElt, code, socketWrapper) {
    if (RECONNECT_CODES.indexOf(code) < 0 || !socketElt.isConnected) return;
    var count = reconnects.get(socketElt) || 0;
    reconnects.set(socketElt, count + 1);
    setTimeout(function () {
      if (socketElt.isConnected) socketWrapper.reconnect();
    }, htmx.config.wsReconnectDelay(count));
  }

  // The lineage indents each session by its depth. The Content-Security-Policy
  // refuses style attributes in the markup, so the depth comes as data-depth.
  function indentByDepth(root) {
    root.querySelectorAll("[data-depth]").forEach(function (el) {
      el.style.setProperty("--depth", el.getAttribute("data-depth"));
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    indentByDepth(document);
    refreshTimes(document);
    setInterval(function () { refreshTimes(document); }, 1000);
    if (!window.htmx) return;
    htmx.onLoad(function (el) { refreshTimes(el); });
    document.body.addEventListener("htmx:wsOpen", function (event) {
      reconnects.delete(event.target);
      setLiveState("Live", "open");
    });
    document.body.addEventListener("htmx:wsClose", function (event) {
      var code = event.detail.event.code;
      var comesBack = HTMX_RECONNECT_CODES.indexOf(code) >= 0 || RECONNECT_CODES.indexOf(code) >= 0;
      // Refused for good (4401 logged out, 4404 no such session, ...): only a reload can tell why.
      // 4410: the session was deleted while it was watched (the server's frame said so first).
      setLiveState(code === 4410 ? GONE_TEXT : comesBack ? "Reconnecting…" : "Disconnected: reload the page", "closed");
      reconnectAfter(event.target, code, event.detail.socketWrapper);
    });
    document.body.addEventListener("htmx:oobBeforeSwap", function (event) {
      var target = event.detail.target, fragment = event.detail.fragment;
      if (!fragment) return;
      // Appends are idempotent: a frame sent again after a cut socket replaces what it appended before.
      var removed = [];
      Array.prototype.forEach.call(fragment.children || [], function (child) {
        var existing = child.id && document.getElementById(child.id);
        if (existing === target) removed.push(target);  // an element replaced by its new render
        else if (existing && !existing.contains(target)) removed.push(existing);
      });
      keepReadersDetails(target, fragment, removed);
      removed.forEach(function (el) { if (el !== target) el.remove(); });
    });
    // A fork form opens under its control: keep it in view; Cancel or Escape
    // closes it and gives focus back to the control.
    document.body.addEventListener("htmx:afterSwap", function (event) {
      var form = event.detail.target.querySelector(".fork-form") || event.detail.target.closest(".fork-form");
      // A form that replaced itself (outerHTML, as after a refused name) is the old element here.
      if (form && !form.isConnected) form = document.querySelector(".fork-form");
      if (!form) return;
      form.scrollIntoView({ block: "nearest" });
      // Focus goes into the form at once: the swap removed the focused button, and htmx honours
      // autofocus only after it settles, so an Escape pressed meanwhile reached no form.
      var first = form.querySelector("[autofocus]");
      if (first && !form.contains(document.activeElement)) first.focus();
    });
    // A note saved (204): its form is emptied and folded; the live frame shows the note to every page of the session.
    document.body.addEventListener("htmx:afterRequest", function (event) {
      var form = event.detail.elt;
      if (!form || !form.matches || !form.matches("form.note-form") || event.detail.xhr.status !== 204) return;
      form.reset();
      var details = form.closest("details.add-note");
      if (details) details.open = false;
    });
    function closeForkForm(form) {
      var control = form.closest(".fork") && form.closest(".fork").querySelector("a");
      form.remove();
      if (control) control.focus();
    }
    document.addEventListener("click", function (event) {
      var cancel = event.target.closest(".fork-cancel");
      if (cancel) closeForkForm(cancel.closest(".fork-form"));
    });
    document.addEventListener("keydown", function (event) {
      var form = event.key === "Escape" && event.target.closest && event.target.closest(".fork-form");
      if (form) closeForkForm(form);
    });
    // A link to #seq-N whose event is on a page of a long turn not shown, or in earlier turns: fetched, then shown.
    // Swapped with no settle delay: until htmx settles, a page swapped in for its stub keeps the stub's attributes
    // (its class too, which hides a stub inside a run), and scrolling to what it holds would do nothing.
    function reveal(attempts) {
      var match = /^#seq-(\d+)$/.exec(window.location.hash);
      var transcript = document.querySelector("[data-pages-url]");
      if (!match || !transcript || document.getElementById("seq-" + match[1])) return;
      var seq = Number(match[1]);
      var earlier = document.querySelector(".earlier button");
      var firstShown = document.querySelector("#blocks > [id]");
      var before = earlier && Number(earlier.closest(".earlier").id.replace("earlier-", ""));
      var settled = function () {
        var found = document.getElementById("seq-" + seq);
        if (found) found.scrollIntoView({ block: "start" });
        else if (attempts > 0) reveal(attempts - 1);
      };
      if (earlier && seq < before) {
        htmx.ajax("GET", earlier.getAttribute("hx-get"), { target: earlier.closest(".earlier"), swap: "outerHTML settle:0ms" }).then(settled);
      } else if (firstShown) {
        htmx.ajax("GET", transcript.getAttribute("data-pages-url") + "?seq=" + seq, { swap: "none settle:0ms" }).then(function () {
          var found = document.getElementById("seq-" + seq);
          if (found) found.scrollIntoView({ block: "start" });
        });
      }
    }
    if (window.htmx) {
      reveal(30);
      window.addEventListener("hashchange", function () { reveal(30); });
    }
    // The ledger panel's order, sent with each live change: rows put in it, rows no longer listed dropped,
    // rows missing or in another version fetched once (their state follows the status, or they entered the window).
    function arrangeLedger(fetchMissing) {
      var order = document.getElementById("ledger-order");
      var body = document.getElementById("ledger-rows");
      if (!order || !body) return;
      var wanted = (order.getAttribute("data-rows") || "").split(" ").filter(Boolean).map(function (pair) {
        var cut = pair.lastIndexOf(":");
        return { id: pair.slice(0, cut), version: pair.slice(cut + 1) };
      });
      var listed = {};
      wanted.forEach(function (row) { listed[row.id] = true; });
      Array.prototype.slice.call(body.children).forEach(function (row) { if (!listed[row.id]) row.remove(); });
      var missing = [];
      wanted.forEach(function (want) {
        var row = document.getElementById(want.id);
        if (row && row.parentNode === body) body.appendChild(row);
        if (!row || row.getAttribute("data-version") !== want.version) missing.push(want.id);
      });
      if (missing.length && fetchMissing) {
        var url = order.getAttribute("data-url");
        url += (url.indexOf("?") < 0 ? "?" : "&") + "rows=" + encodeURIComponent(missing.join(","));
        // From the panel: htmx queues a request behind one under way from the same element (a link's page fetch too).
        htmx.ajax("GET", url, { source: document.getElementById("ledger-panel") || document.body, swap: "none" });
      }
    }
    document.body.addEventListener("htmx:wsAfterMessage", function () { arrangeLedger(true); });
    // A session caught up at a (re)connect is put at the top of the list (dashboard/live/seen.py): its older row goes.
    document.body.addEventListener("htmx:wsAfterMessage", function () {
      var body = document.getElementById("session-rows");
      if (!body) return;
      var kept = {};
      Array.prototype.slice.call(body.children).forEach(function (row) {
        if (!row.id) return;
        if (kept[row.id]) row.remove(); else kept[row.id] = true;
      });
    });
    // Fetched rows are appended: put in order once swapped in. Not on htmx.ajax's promise, which htmx resolves at
    // once for a request it queues behind one under way.
    document.body.addEventListener("htmx:afterRequest", function () { arrangeLedger(false); });
    document.body.addEventListener("htmx:wsAfterMessage", function () {
      var empty = document.getElementById("no-events");
      if (empty && document.querySelector("#blocks .block, #raw-rows .raw-row")) empty.remove();
    });
  });
})();
