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
    }

    function refresh() {
      var option = catalog.options[catalog.selectedIndex];
      if (customField) customField.hidden = !!(option && option.value);
      portField.hidden = kind() !== "service";
      if (option) showDescription(option);
    }

    catalog.addEventListener("change", function () {
      var option = catalog.options[catalog.selectedIndex];
      if (option && option.value) {
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
