// The proxy's "starting" page: it reloads itself every few seconds until the service answers, and the
// reader can turn that off (WCAG 2.2.1: a page that refreshes on its own must let people stop it). Without
// JavaScript the page says to reload it by hand, and the proxy's Retry-After header says when.
(function () {
  const box = document.querySelector("[data-refresh-seconds]");
  const button = document.getElementById("stop-checking");
  if (!box || !button) return;
  const seconds = Number(box.dataset.refreshSeconds) || 3;
  const timer = setTimeout(() => location.reload(), seconds * 1000);
  button.hidden = false;
  button.addEventListener("click", () => {
    clearTimeout(timer);
    button.hidden = true;
    document.getElementById("checking").textContent = "Automatic checking is off. Reload this page to check again.";
  });
})();
