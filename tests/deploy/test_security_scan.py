"""`make lint`'s scanners (devtools/security_scan.py) can fail: checkov refuses a deliberately bad manifest
with the project's own skip list, bandit refuses dangerous code with the project's own config, and the
manifests it scans are the chart and the objects the portal really makes."""

from __future__ import annotations

import subprocess
import textwrap

import pytest
import yaml

from devtools import security_scan

BAD_POD = """\
apiVersion: v1
kind: Pod
metadata:
  name: escape
  namespace: gpuportal-vision
spec:
  hostNetwork: true
  hostPID: true
  containers:
    - name: main
      image: busybox:1.36
      securityContext:
        privileged: true
        runAsUser: 0
        allowPrivilegeEscalation: true
      volumeMounts:
        - {name: root, mountPath: /host}
  volumes:
    - name: root
      hostPath: {path: /}
"""

needs_checkov = pytest.mark.skipif(
    not security_scan.CHECKOV.exists(), reason="checkov's environment is made by `make lint` (.venv-checkov)"
)


def test_the_scanned_manifests_are_the_chart_and_the_portals_own_objects(tmp_path):
    files = {p.name: list(yaml.safe_load_all(p.read_text())) for p in security_scan.render_all(tmp_path)}
    assert set(files) == {
        "chart-default.yaml",
        "chart-full.yaml",
        "team-namespace.yaml",
        "workload-batch.yaml",
        "workload-service.yaml",
    }
    kinds = {name: sorted(d["kind"] for d in docs) for name, docs in files.items()}
    assert kinds["workload-batch.yaml"] == ["Job"]
    assert kinds["workload-service.yaml"] == ["Deployment", "Service"]
    assert {"Namespace", "NetworkPolicy", "LimitRange", "ResourceQuota", "RoleBinding"} <= set(
        kinds["team-namespace.yaml"]
    )
    assert "DaemonSet" in kinds["chart-full.yaml"]  # full values: the agent too
    # Every namespaced chart object says its namespace (checkov would otherwise see `default`).
    for docs in (files["chart-default.yaml"], files["chart-full.yaml"]):
        for doc in docs:
            if not doc["kind"].startswith(("Cluster", "ValidatingAdmission", "ValidatingWebhook")):
                assert doc["metadata"].get("namespace") == "portal", doc["metadata"]["name"]


@needs_checkov
@pytest.mark.slow
def test_checkov_fails_on_a_privileged_pod_with_the_projects_skip_list(tmp_path):
    (tmp_path / "bad.yaml").write_text(BAD_POD)
    result = security_scan.checkov(tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    for check in ("CKV_K8S_16", "CKV_K8S_19", "CKV_K8S_17", "CKV_K8S_28"):  # privileged, hostNetwork, hostPID, NET_RAW
        assert check in result.stdout


@needs_checkov
@pytest.mark.slow
def test_checkov_passes_the_real_manifests(tmp_path):
    security_scan.render_all(tmp_path)
    result = security_scan.checkov(tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_bandit_fails_on_dangerous_code_with_the_projects_config(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text(
        textwrap.dedent(
            """\
            import pickle
            import subprocess


            def load(blob, name):
                subprocess.call("ls " + name, shell=True)
                return pickle.loads(blob)
            """
        )
    )
    argv = security_scan.bandit_argv((str(bad),))
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert result.returncode == 1
    assert "B602" in result.stdout  # shell=True
    assert "B301" in result.stdout  # pickle
