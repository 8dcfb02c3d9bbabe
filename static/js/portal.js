// Small behaviours every page shares. Pages work without them; these make them quicker to use.
(function () {
  "use strict";

  // Signing in again (in another tab, or after the session ended) gives the browser a new CSRF secret, and
  // every page opened before it carries the old one: its forms would be refused and what was typed lost.
  // The cookie holds the current secret, which Django accepts as the token, so each form and htmx request
  // sends that instead of the one the page was rendered with.
  function currentCsrfToken() {
    var found = document.cookie.match(/(?:^|;\s*)csrftoken=([^;]+)/);
    return found ? decodeURIComponent(found[1]) : null;
  }
  function refreshCsrfToken(form) {
    var token = currentCsrfToken();
    var field = form && form.querySelector("input[name=csrfmiddlewaretoken]");
    if (token && field) field.value = token;
  }
  document.addEventListener("submit", function (event) { refreshCsrfToken(event.target); }, true);
  document.addEventListener("htmx:configRequest", function (event) {
    var token = currentCsrfToken();
    if (token) event.detail.headers["X-CSRFToken"] = token;
  });

  // A box that refreshes itself (htmx) after the session ended is answered with a one-line "signed out"
  // notice (portal/htmx.py, marked by its header). What the box showed stays, so the page still says what
  // it knew (a workload's state and times, the dashboard): the notice goes just before the first box that
  // learns it, once for the page (a workload page has several such boxes), and the boxes keep asking. The
  // first answer after signing in again (in another tab) updates its box as usual and takes the notice away.
  var SIGNED_OUT_HEADER = "GPUPortal-Signed-Out";
  document.addEventListener("htmx:beforeSwap", function (event) {
    var xhr = event.detail.xhr, target = event.detail.target;
    if (!xhr || !target || !target.parentNode) return;
    var shown = document.querySelector("[data-signed-out-notice]");
    if (xhr.getResponseHeader(SIGNED_OUT_HEADER) !== "1") {
      if (shown && event.detail.shouldSwap) shown.remove();
      return;
    }
    event.detail.shouldSwap = false;
    if (shown) return;
    var holder = document.createElement("div");
    holder.innerHTML = xhr.responseText;  // the portal's own line (portal/htmx.py), escaped there
    var notice = holder.firstElementChild;
    if (!notice) return;
    notice.setAttribute("data-signed-out-notice", "");
    target.parentNode.insertBefore(notice, target);
  });

  // A select that submits its form when changed (the team picker).
  document.addEventListener("change", function (event) {
    var target = event.target;
    if (target.matches && target.matches("select[data-autosubmit]")) {
      target.form.requestSubmit();
    }
  });

  // A form[data-confirm] sent by its own button (remove a member, delete a secret): ask first; a No sends
  // nothing. (The Cancel link below submits with form.submit(), which fires no submit event: asked once.)
  document.addEventListener("submit", function (event) {
    var question = event.target.getAttribute && event.target.getAttribute("data-confirm");
    if (question && !window.confirm(question)) event.preventDefault();
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
      refreshCsrfToken(form);
      form.submit();
    }
  });

  // The Menu button of the phone's top bar: it shows the sections and the account, says whether they are
  // open (aria-expanded), and Escape closes them and gives focus back to it. Without this script the
  // button stays hidden and the sections are simply listed (see portal.css).
  document.addEventListener("DOMContentLoaded", function () {
    var button = document.getElementById("menu-toggle");
    var panel = document.getElementById("site-menu");
    if (!button || !panel) return;
    button.closest(".topbar").classList.add("menu-ready");

    function setOpen(open) {
      panel.classList.toggle("open", open);
      button.setAttribute("aria-expanded", open ? "true" : "false");
    }

    button.addEventListener("click", function () {
      setOpen(button.getAttribute("aria-expanded") !== "true");
    });
    document.addEventListener("keydown", function (event) {
      if (event.key === "Escape" && button.getAttribute("aria-expanded") === "true") {
        setOpen(false);
        button.focus();
      }
    });
    // Back from another page (bfcache): closed, as a fresh page is.
    window.addEventListener("pageshow", function () { setOpen(false); });
  });

  // Focus the error summary after a failed submit so keyboard and screen-reader users land on it.
  document.addEventListener("DOMContentLoaded", function () {
    var summary = document.getElementById("error-summary");
    if (summary) summary.focus();
  });
})();
