#!/usr/bin/env bash
# The agent against a real GPU: run on a machine with an NVIDIA driver (the device machine), from the
# repository root. Needs python3 with pytest; pynvml and prometheus_client are taken from .device/site
# (the project's pinned versions, copied there by `bash devtools/device_check.sh --prepare` on a machine
# with the project's virtualenv) when it exists. Writes what it saw under ${OUT:-/tmp/device-check}.
set -u -o pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--prepare" ]; then
    site=$(.venv/bin/python -c 'import pynvml, os; print(os.path.dirname(pynvml.__file__))')
    rm -rf .device && mkdir -p .device/site
    cp "$site/pynvml.py" .device/site/
    cp -r "$site/prometheus_client" .device/site/
    echo "prepared .device/site (pynvml, prometheus_client from .venv)"
    exit 0
fi
out=${OUT:-/tmp/device-check}
mkdir -p "$out"
[ -d .device/site ] && export PYTHONPATH="$PWD/.device/site${PYTHONPATH:+:$PYTHONPATH}"
{
    nvidia-smi --query-gpu=index,name,uuid,driver_version,memory.total,mig.mode.current,temperature.gpu,power.draw,clocks.sm --format=csv
    python3 -c 'import pynvml, prometheus_client; print("pynvml", pynvml.__file__); print("prometheus_client", prometheus_client.__file__)'
} >"$out/gpu.txt" 2>&1
cat "$out/gpu.txt"
GPU_REPORT_OUT="$out/report.json" PYTHONUNBUFFERED=1 timeout 400 python3 -m pytest --noconftest -p no:cacheprovider \
    -c /dev/null --rootdir=. -v -s -rs tests/agent/test_real_nvml.py tests/agent/test_nvml.py 2>&1 | tee "$out/pytest.log"
