// The usage chart: GPU-hours per day, stacked by GPU type, from the numbers the page embeds.
// Chart.js (200 KB) is fetched only when the chart comes near the screen: a phone that opens the page for
// the totals at the top does not pay for it, and nothing else on the page waits for it.
(function () {
  "use strict";

  function draw(canvas, chart) {
    canvas.chart = new window.Chart(canvas, {
      type: "bar",
      data: chart,
      options: {
        responsive: true,
        maintainAspectRatio: false,
        animation: false,
        scales: {
          x: { stacked: true },
          y: { stacked: true, beginAtZero: true, title: { display: true, text: "GPU-hours" } },
        },
        plugins: { legend: { position: "bottom" } },
      },
    });
  }

  function load(canvas, chart) {
    if (window.Chart) return draw(canvas, chart);
    var script = document.createElement("script");
    script.src = canvas.dataset.library;
    script.onload = function () {
      draw(canvas, chart);
    };
    document.head.appendChild(script);
  }

  document.addEventListener("DOMContentLoaded", function () {
    var canvas = document.getElementById("usage-chart");
    var data = document.getElementById("usage-data");
    if (!canvas || !data || !canvas.dataset.library) return;
    var chart = JSON.parse(data.textContent);
    if (!("IntersectionObserver" in window)) return load(canvas, chart);
    var watcher = new IntersectionObserver(
      function (entries) {
        if (!entries.some(function (entry) { return entry.isIntersecting; })) return;
        watcher.disconnect();
        load(canvas, chart);
      },
      { rootMargin: "300px 0px" },
    );
    watcher.observe(canvas);
  });
})();
