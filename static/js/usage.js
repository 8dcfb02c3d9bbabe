// The usage chart: GPU-hours per day, stacked by GPU type, from the numbers the page embeds.
(function () {
  "use strict";

  document.addEventListener("DOMContentLoaded", function () {
    var canvas = document.getElementById("usage-chart");
    var data = document.getElementById("usage-data");
    if (!canvas || !data || !window.Chart) return;
    var chart = JSON.parse(data.textContent);
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
  });
})();
