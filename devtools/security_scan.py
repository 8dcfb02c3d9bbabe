"""`make lint`'s security scanners: checkov over the Kubernetes objects we ship or make, bandit over the
product code. Any finding that is not skipped in a config file fails the run (exit code 1).

    python -m devtools.security_scan [--manifests-only] [--keep DIR]

1. Renders, into a temporary directory, what reaches a cluster:
   - the Helm chart with its default values and with helm/ci/full.yaml (devtools/chart.py, `helm template`);
   - a batch and a service workload as jobs/kube/objects.py renders them for users (the real renderer,
     with a workspace, a dataset, a stored secret and a private registry's pull secret, so every branch
     of the pod spec is there).
2. Runs checkov (its own environment, .venv-checkov, from requirements/checkov.txt; see the Makefile) over
   that directory with .checkov.yaml, where every skipped check is listed once with its reason.
3. Runs bandit over the product packages with the [tool.bandit] table of pyproject.toml.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from devtools.chart import CHART_DIR, REPO_ROOT, load_values, render

CHECKOV = REPO_ROOT / ".venv-checkov" / "bin" / "checkov"
CHECKOV_CONFIG = REPO_ROOT / ".checkov.yaml"
# What runs in a deployment; tests, benchmarks and the developer tooling (devtools/, localcluster/) do not.
PRODUCT_PACKAGES = ("portal", "jobs", "api", "cli", "agent", "telemetry", "proxy", "identity", "notifications")
CHART_VALUE_SETS = {"chart-default": None, "chart-full": CHART_DIR / "ci" / "full.yaml"}


def say(message: str) -> None:
    print(f"[scan] {message}", file=sys.stderr, flush=True)


def _write(path: Path, docs: list[dict]) -> Path:
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return path


def chart_manifests(directory: Path) -> list[Path]:
    """The chart, rendered offline as `helm template` would, one file per value set."""
    written = []
    for stem, values_file in CHART_VALUE_SETS.items():
        values = load_values(values_file) if values_file else {}
        written.append(_write(directory / f"{stem}.yaml", [m.obj for m in render(values, release="gp")]))
    return written


def workload_manifests(directory: Path) -> list[Path]:
    """A batch job and a service as the portal creates them, and their team namespace (jobs/kube/objects.py)."""
    from kubernetes.client import ApiClient

    from jobs.kube import objects

    gpu = objects.GpuTypeSpec("a100", "gputype", "a100", "nvidia.com/gpu", 8000, 65536)
    common = {
        "team_slug": "vision",
        "username": "alice",
        "namespace": "gpuportal-vision",
        "gpu_type": gpu,
        "gpu_count": 1,
        "time_limit_seconds": 3600,
        "env": (("EPOCHS", "3"),),
        "volumes": (
            objects.VolumeSpec("home", "/home/alice", claim_name="gpuportal-home-alice"),
            objects.VolumeSpec("dataset-imagenet", "/datasets/imagenet", read_only=True, claim_name="imagenet"),
        ),
        "secrets": (objects.SecretRef("wandb", "gpuportal-secret-wandb", env="WANDB_API_KEY"),),
        "image_pull_secrets": ("gpuportal-pull-registry-example-org",),
        "instance": "scan",
    }
    batch = objects.WorkloadSpec(
        uid="0123456789abcdef", name="train", kind="batch", command=("python", "train.py"),
        image="registry.example.org/vision/train@sha256:" + "0" * 64, **common,
    )  # fmt: skip
    service = objects.WorkloadSpec(
        uid="fedcba9876543210", name="notebook", kind="service", port=8888, read_only_root=True,
        image="quay.io/jupyter/pytorch-notebook@sha256:" + "1" * 64, **common,
    )  # fmt: skip
    # The team namespace they run in, as the provisioner makes it (jobs/services/provisioning.py).
    namespace = common["namespace"]
    team = [
        objects.make_namespace(namespace, team_slug="vision", instance="scan"),
        objects.make_resource_quota(
            namespace,
            objects.NamespaceCaps(gpus_by_resource={"nvidia.com/gpu": 8}, cpu_millicores=32000, memory_mib=131072),
        ),
        objects.make_limit_range(namespace, ephemeral_storage="20Gi"),
        objects.make_network_policy(
            namespace,
            objects.NetworkRules(
                proxy_labels={"app.kubernetes.io/instance": "gp", "app.kubernetes.io/component": "proxy"},
                portal_namespace_labels={"kubernetes.io/metadata.name": "portal"},
            ),
        ),
        objects.make_role_binding(
            namespace, cluster_role="gp-gpuportal-workloads", service_account="portal/gp-gpuportal"
        ),
    ]
    api = ApiClient()
    written = []
    for stem, made in (("team-namespace", team), ("workload-batch", objects.make_objects(batch)),
                       ("workload-service", objects.make_objects(service))):  # fmt: skip
        written.append(_write(directory / f"{stem}.yaml", [api.sanitize_for_serialization(obj) for obj in made]))
    return written


def render_all(directory: Path) -> list[Path]:
    return chart_manifests(directory) + workload_manifests(directory)


def checkov(directory: Path, *, config: Path = CHECKOV_CONFIG) -> subprocess.CompletedProcess[str]:
    """checkov over every manifest in `directory`; its exit code is 1 on any failed check not skipped."""
    if not CHECKOV.exists():
        raise SystemExit(f"{CHECKOV} is missing: run `make lint` (it creates .venv-checkov)")
    env = {
        **os.environ,
        # No network: no update check, no policy download, no telemetry (the scan is all local).
        "CHECKOV_RUN_SCA_PACKAGE_SCAN_V2": "false",
        "BC_SKIP_MAPPING": "TRUE",
        "CHECKOV_NO_OUTPUT_UPDATE_CHECK": "1",
        "ANSI_COLORS_DISABLED": "1",
    }
    argv = [str(CHECKOV), "--config-file", str(config), "--directory", str(directory)]
    return subprocess.run(argv, env=env, capture_output=True, text=True, check=False)


def bandit_argv(paths: tuple[str, ...] = PRODUCT_PACKAGES) -> list[str]:
    """bandit with the [tool.bandit] table of pyproject.toml; exit code 1 on any issue not skipped there."""
    return [sys.executable, "-m", "bandit", "-c", str(REPO_ROOT / "pyproject.toml"), "-q", "-r", *paths]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--manifests-only", action="store_true", help="render and scan the manifests; no bandit")
    parser.add_argument("--keep", type=Path, help="render into this directory and keep it (default: a temporary one)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    directory = args.keep or Path(tempfile.mkdtemp(prefix="gpuportal-scan-"))
    directory.mkdir(parents=True, exist_ok=True)
    failed = False
    # bandit reads only the code: it runs beside the rendering and checkov (CPU-bound, one core each).
    scan_code = (
        None
        if args.manifests_only
        else subprocess.Popen(bandit_argv(), cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    )
    try:
        files = render_all(directory)
        say(f"rendered {len(files)} manifest files into {directory}")
        result = checkov(directory)
        if result.returncode != 0:
            failed = True
            print(result.stdout, result.stderr, sep="\n")
            say("checkov found problems (above): fix them, or skip a check in .checkov.yaml with its reason")
        else:
            say("checkov: no failed check")
        if scan_code is not None:
            output, _ = scan_code.communicate()
            if scan_code.returncode != 0:
                failed = True
                print(output)
                say("bandit found problems (above): fix them, or skip in pyproject.toml [tool.bandit] with why")
            else:
                say("bandit: no issue")
    finally:
        if scan_code is not None and scan_code.poll() is None:
            scan_code.kill()
        if not args.keep:
            shutil.rmtree(directory, ignore_errors=True)
    say(f"done in {time.monotonic() - started:.1f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
