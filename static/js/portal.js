// Small behaviours every page shares. Pages work without them; these make them quicker to use.
(function () {
  "use strict";

  // A select that submits its form when changed (the team picker).
  document.addEventListener("change", function (event) {
    var target = event.target;
    if (target.matches && target.matches("select[data-autosubmit]")) {
      target.form.requestSubmit();
    }
  });

  // A link inside a form[data-confirm]: ask, then submit the form. Without JavaScript the link leads
  // to a confirmation page instead.
  document.addEventListener("click", function (event) {
    var trigger = event.target.closest && event.target.closest("[data-submit-parent]");
    if (!trigger) return;
    var form = trigger.closest("form");
    if (!form) return;
    event.preventDefault();
    var question = form.getAttribute("data-confirm");
    if (!question || window.confirm(question)) {
      form.submit();
    }
  });

  // Focus the error summary after a failed submit so keyboard and screen-reader users land on it.
  document.addEventListener("DOMContentLoaded", function () {
    var summary = document.getElementById("error-summary");
    if (summary) summary.focus();
  });
})();
