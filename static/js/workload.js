// The detail page's log follower: server-sent events append lines as the container writes them.
(function () {
  "use strict";

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
        var atBottom = target.scrollTop + target.clientHeight >= target.scrollHeight - 4;
        target.appendChild(document.createTextNode(event.data + "\n"));
        if (atBottom) target.scrollTop = target.scrollHeight;
      });
      source.addEventListener("end", function (event) { stop(event.data); });
      source.addEventListener("unavailable", function (event) { stop(event.data); });
      source.onerror = function () { stop("The log stream was interrupted."); };
    });
  });
})();
