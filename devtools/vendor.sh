#!/usr/bin/env bash
# Copy the pages' browser libraries (installed by `npm ci` from package-lock.json) into static/vendor/.
# One list, used by `make vendor` and by the Dockerfile's assets stage.
set -euo pipefail
modules="${1:-node_modules}"
target="${2:-static/vendor}"
rm -rf "$target" && mkdir -p "$target"
cp "$modules/htmx.org/dist/htmx.min.js" \
   "$modules/chart.js/dist/chart.umd.min.js" \
   "$modules/chart.js/dist/chart.umd.min.js.map" \
   "$modules/@xterm/xterm/lib/xterm.js" \
   "$modules/@xterm/xterm/lib/xterm.js.map" \
   "$modules/@xterm/xterm/css/xterm.css" \
   "$modules/@xterm/addon-fit/lib/addon-fit.js" \
   "$modules/@xterm/addon-fit/lib/addon-fit.js.map" \
   "$target/"  # the map too: collectstatic follows the reference to it
