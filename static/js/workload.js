// The detail page's log box: it shows its newest line (unless the reader scrolled up), it is read again
// when the workload changes state, and while the workload runs it follows the log: lines are appended as
// the container writes them (server-sent events).
(function () {
  "use strict";

  function atEnd(box) {
    return box.scrollTop + box.clientHeight >= box.scrollHeight - 4;
  }

  // Before htmx replaces the log, remember whether the reader was at its end (or had no log yet);
  // after, keep them there: a finished job's last line ("exited with code 0") is what they came for.
  var followEnd = true;
  document.addEventListener("htmx:beforeSwap", function (event) {
    if (event.detail.target.id !== "logs") return;
    var box = event.detail.target.querySelector("pre.logs");
    followEnd = !box || atEnd(box);
  });
  document.addEventListener("htmx:afterSettle", function (event) {
    var target = event.detail.target;
    if (target.id === "logs") {
      var box = target.querySelector("pre.logs");
      if (box && followEnd) box.scrollTop = box.scrollHeight;
    }
  });

  // The live part of the page is replaced every few seconds; when the state it shows changes, the log
  // is read again, so it never says "not started yet" about a job that has finished.
  var shownState = null;
  document.addEventListener("htmx:afterSettle", function () {
    var live = document.getElementById("live");
    if (!live) return;
    var state = live.dataset.state;
    if (shownState !== null && state !== shownState && window.htmx) {
      window.htmx.trigger(document.body, "workload-state-changed");
    }
    shownState = state;
  });
  document.addEventListener("DOMContentLoaded", function () {
    var live = document.getElementById("live");
    if (live) shownState = live.dataset.state;
  });

  // Following the log (server-sent events). A running workload's log is followed from the moment its
  // page opens, or from the moment it starts running: no button to press. The stream begins with the
  // same recent lines the page shows, then each line as the container writes it, so nothing is missed
  // between the two. While the tab is hidden the stream is paused (it holds a web thread, and each
  // person may have only a few open) and picks up again when the tab is back. "Stop following" stops it
  // for good on this page; "Follow" starts it again.
  document.addEventListener("DOMContentLoaded", function () {
    var button = document.getElementById("logs-follow");
    if (!button || !window.EventSource) return;
    var logs = document.getElementById("logs");
    var status = document.getElementById("logs-status");
    var source = null;
    var stoppedByReader = false;
    var pausedHidden = false;

    function pre() {
      var existing = logs.querySelector("pre.logs");
      if (existing) return existing;
      logs.innerHTML = "";
      var created = document.createElement("pre");
      created.className = "logs";
      created.tabIndex = 0;
      created.setAttribute("aria-label", "Container log");
      logs.appendChild(created);
      return created;
    }

    function running() {
      var live = document.getElementById("live");
      return !!live && live.dataset.state === "RUNNING";
    }

    function stop(message) {
      if (source) source.close();
      source = null;
      button.setAttribute("aria-pressed", "false");
      button.textContent = "Follow";
      status.textContent = message || "";
    }

    function start() {
      if (source) return;
      // A gang job: the rank picked beside the button.
      var rank = document.getElementById("logs-rank");
      var url = button.dataset.stream + (rank ? "?rank=" + encodeURIComponent(rank.value) : "");
      var stream = new EventSource(url);
      source = stream;
      button.setAttribute("aria-pressed", "true");
      button.textContent = "Stop following";
      status.textContent = "Following the log…";
      var fresh = true;  // the first line replaces what the page showed: the stream repeats its last lines
      stream.addEventListener("line", function (event) {
        var target = pre();
        if (fresh) {
          target.textContent = "";
          fresh = false;
        }
        if (readPending) streamedDuringRead = true;
        var atBottom = atEnd(target);
        target.appendChild(document.createTextNode(event.data + "\n"));
        if (atBottom) target.scrollTop = target.scrollHeight;
      });
      stream.addEventListener("end", function (event) { if (source === stream) stop(event.data); });
      stream.addEventListener("unavailable", function (event) { if (source === stream) stop(event.data); });
      stream.onerror = function () { if (source === stream) stop("The log stream was interrupted."); };
    }

    // Another rank picked: the stream of the previous one stops (Follow starts the new rank's).
    var rankPicker = document.getElementById("logs-rank");
    if (rankPicker) rankPicker.addEventListener("change", function () { stop(""); });

    button.addEventListener("click", function () {
      if (source) {
        stoppedByReader = true;
        stop("Stopped following.");
      } else {
        stoppedByReader = false;
        start();
      }
    });

    // While following, the log is not read again on a state change: the stream has every line already.
    // A read that was under way when the stream began is not shown either: the stream's lines are newer.
    var readPending = false, streamedDuringRead = false;
    document.addEventListener("htmx:beforeRequest", function (event) {
      if (event.detail.target !== logs) return;
      if (source && event.detail.elt === logs) {
        event.preventDefault();
        return;
      }
      readPending = true;
      streamedDuringRead = false;
    });
    document.addEventListener("htmx:beforeSwap", function (event) {
      if (event.detail.target !== logs) return;
      if (readPending && streamedDuringRead) event.detail.shouldSwap = false;
      readPending = false;
    });
    // A workload that starts running while its page is open: follow it from then on.
    document.body.addEventListener("workload-state-changed", function () {
      if (running() && !stoppedByReader && !document.hidden) start();
    });
    document.addEventListener("visibilitychange", function () {
      if (document.hidden && source) {
        pausedHidden = true;
        stop("Paused while this tab is hidden.");
      } else if (!document.hidden && pausedHidden) {
        pausedHidden = false;
        if (running() && !stoppedByReader) start();
      }
    });

    // Following begins once the page's first read of the log is in (so that read never lands on top
    // of the stream's lines); without htmx there is no such read.
    if (!window.htmx || !logs.hasAttribute("hx-get")) {
      if (running() && !document.hidden) start();
      return;
    }
    var firstRead = true;
    document.addEventListener("htmx:afterRequest", function (event) {
      if (event.detail.target !== logs || !firstRead) return;
      firstRead = false;
      if (running() && !document.hidden && !stoppedByReader) start();
    });
  });
})();
