#!/usr/bin/env bash
# Install the Debian packages given as arguments, if any is missing. Quiet when all are present.
#   devtools/system-deps.sh redis-server postgresql chromium
set -euo pipefail
missing=()
for p in "$@"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "[setup] installing Debian packages: ${missing[*]}" >&2
if [ "$(id -u)" -eq 0 ]; then sudo=(); elif command -v sudo >/dev/null; then sudo=(sudo); else
  echo "[setup] ERROR: need root or sudo to install: ${missing[*]}. Install them and rerun." >&2; exit 1; fi
# Servers we run ourselves must not be started as system services by their maintainer scripts.
policy=/usr/sbin/policy-rc.d; created=0
if [ ! -e "$policy" ]; then printf '#!/bin/sh\nexit 101\n' | "${sudo[@]}" tee "$policy" >/dev/null; "${sudo[@]}" chmod +x "$policy"; created=1; fi
cleanup() { [ $created -eq 1 ] && "${sudo[@]}" rm -f "$policy"; return 0; }
trap cleanup EXIT
"${sudo[@]}" apt-get update -qq || { echo "[setup] ERROR: apt-get update failed (network?)" >&2; exit 1; }
DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null \
  || { echo "[setup] ERROR: apt-get install ${missing[*]} failed" >&2; exit 1; }
