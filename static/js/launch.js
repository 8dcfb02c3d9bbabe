// The launch form: a catalog image fills in its defaults; custom image and port show when they apply;
// environment rows can be added and removed.
(function () {
  "use strict";

  function ready(fn) {
    if (document.readyState !== "loading") fn();
    else document.addEventListener("DOMContentLoaded", fn);
  }

  ready(function () {
    var form = document.getElementById("launch-form");
    if (!form) return;
    var catalog = form.querySelector("select[name=catalog_image]");
    var description = document.getElementById("catalog-description");
    var customField = document.getElementById("custom-image-field");
    var portField = document.getElementById("port-field");
    var copiesField = document.getElementById("copies-field");
    var command = form.querySelector("[name=command]");
    var args = form.querySelector("[name=args]");
    var port = form.querySelector("[name=port]");

    function kind() {
      var checked = form.querySelector("input[name=kind]:checked");
      return checked ? checked.value : "batch";
    }

    function setKind(value) {
      var radio = form.querySelector("input[name=kind][value=" + value + "]");
      if (radio) radio.checked = true;
    }

    function showDescription(option) {
      description.textContent = option.dataset.description || "";
      if (option.dataset.reference) {
        var ref = document.createElement("span");
        ref.className = "mono muted";
        ref.textContent = " " + option.dataset.reference;
        description.appendChild(ref);
      }
      // Whether the image runs as root is the admin's call; say it before the user submits.
      if (option.dataset.root) {
        var note = document.createElement("span");
        note.className = option.dataset.root === "allowed" ? "root-note" : "root-note bad";
        note.textContent = option.dataset.root === "allowed"
          ? " Runs as root (allowed by an administrator)."
          : " Needs root, which an administrator has not allowed: it cannot be launched.";
        description.appendChild(note);
      }
    }

    function refresh() {
      var option = catalog.options[catalog.selectedIndex];
      if (customField) customField.hidden = !!(option && option.value);
      portField.hidden = kind() !== "service";
      // A service runs once: copies are for batch jobs (the server says so too, without this script).
      if (copiesField) copiesField.hidden = kind() === "service";
      // Several nodes (a gang job) are for batch jobs only, as copies are.
      form.querySelectorAll("[data-kind-only=batch]").forEach(function (field) {
        field.hidden = kind() === "service";
      });
      if (option) showDescription(option);
    }

    var gpuType = form.querySelector("select[name=gpu_type]");
    // The chosen type's free GPUs, quota and CUDA, in full under the select (a phone cuts the option short).
    var gpuDetail = document.getElementById("gpu-type-detail");
    if (gpuType && gpuDetail) {
      gpuType.addEventListener("change", function () {
        var chosen = gpuType.options[gpuType.selectedIndex];
        gpuDetail.textContent = chosen ? chosen.textContent.replace(/\s+/g, " ").trim() : "";
      });
    }

    function cudaTuple(version) {
      var parts = (version || "0").split(".");
      return [parseInt(parts[0], 10) || 0, parseInt(parts[1], 10) || 0];
    }

    function runs(gpuOption, needed) {
      if (!needed || !gpuOption.dataset.cuda) return true;
      var have = cudaTuple(gpuOption.dataset.cuda), want = cudaTuple(needed);
      return have[0] > want[0] || (have[0] === want[0] && have[1] >= want[1]);
    }

    // An image that needs a newer CUDA than the chosen GPU type's drivers: pick a type that runs it.
    function matchGpuType(needed) {
      var current = gpuType.options[gpuType.selectedIndex];
      if (!current || runs(current, needed)) return;
      for (var i = 0; i < gpuType.options.length; i++) {
        var candidate = gpuType.options[i];
        if (candidate.dataset.quota !== "0" && runs(candidate, needed)) {
          gpuType.selectedIndex = i;
          gpuType.dispatchEvent(new Event("change", { bubbles: true }));
          return;
        }
      }
    }

    catalog.addEventListener("change", function () {
      var option = catalog.options[catalog.selectedIndex];
      if (option && option.value) {
        matchGpuType(option.dataset.cuda);
        command.value = option.dataset.command || "";
        args.value = option.dataset.args || "";
        port.value = option.dataset.port || "";
        if (option.dataset.suits === "service" || option.dataset.suits === "batch") setKind(option.dataset.suits);
      }
      refresh();
    });
    form.querySelectorAll("input[name=kind]").forEach(function (radio) {
      radio.addEventListener("change", refresh);
    });

    // Environment rows.
    var rows = document.getElementById("env-rows");
    document.getElementById("env-add").addEventListener("click", function () {
      var last = rows.querySelector(".env-row:last-child");
      var row = last.cloneNode(true);
      row.querySelectorAll("input").forEach(function (input) { input.value = ""; });
      row.querySelector("[data-env-remove]").setAttribute("aria-label", "Remove variable");
      rows.appendChild(row);
      row.querySelector("input[name=env_name]").focus();
    });
    rows.addEventListener("click", function (event) {
      var button = event.target.closest("[data-env-remove]");
      if (!button) return;
      var row = button.closest(".env-row");
      if (rows.querySelectorAll(".env-row").length > 1) {
        row.remove();
      } else {
        row.querySelectorAll("input").forEach(function (input) { input.value = ""; });
      }
      var next = rows.querySelector("input[name=env_name]");
      if (next) next.focus();
    });

    refresh();
  });
})();
