// The detail page's log box: it shows its newest line (unless the reader scrolled up), it is read again
// when the workload changes state, and "Follow" appends lines as the container writes them (server-sent
// events).
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

  document.addEventListener("DOMContentLoaded", function () {
    var button = document.getElementById("logs-follow");
    if (!button || !window.EventSource) return;
    var logs = document.getElementById("logs");
    var status = document.getElementById("logs-status");
    var source = null;

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

    function stop(message) {
      if (source) source.close();
      source = null;
      button.setAttribute("aria-pressed", "false");
      button.textContent = "Follow";
      status.textContent = message || "";
    }

    button.addEventListener("click", function () {
      if (source) return stop("Stopped following.");
      source = new EventSource(button.dataset.stream);
      button.setAttribute("aria-pressed", "true");
      button.textContent = "Stop following";
      status.textContent = "Following the log…";
      var target = pre();
      source.addEventListener("line", function (event) {
        var atBottom = atEnd(target);
        target.appendChild(document.createTextNode(event.data + "\n"));
        if (atBottom) target.scrollTop = target.scrollHeight;
      });
      source.addEventListener("end", function (event) { stop(event.data); });
      source.addEventListener("unavailable", function (event) { stop(event.data); });
      source.onerror = function () { stop("The log stream was interrupted."); };
    });
  });
})();
