"""The service proxy in the chart: its own component, routed under /w/, reading and never writing."""

from __future__ import annotations

import yaml

from tests.deploy.helm import CHART_DIR, find, render, render_error


def _by_component(manifests, kind: str, component: str) -> list[dict]:
    return [
        m.obj
        for m in manifests
        if m.kind == kind and m.obj["metadata"]["labels"].get("app.kubernetes.io/component") == component
    ]


def test_proxy_is_its_own_deployment_and_service_labelled_by_component() -> None:
    manifests = render({})
    [deployment] = _by_component(manifests, "Deployment", "proxy")
    pod = deployment["spec"]["template"]
    assert pod["metadata"]["labels"]["app.kubernetes.io/component"] == "proxy"  # what NetworkPolicies select
    [container] = pod["spec"]["containers"]
    assert container["command"] == ["python", "-m", "proxy", "--host", "0.0.0.0", "--port", "8080"]  # noqa: S104
    assert pod["spec"]["serviceAccountName"] == "gp-gpuportal-proxy"
    assert pod["spec"]["automountServiceAccountToken"] is True
    [service] = _by_component(manifests, "Service", "proxy")
    assert service["spec"]["selector"]["app.kubernetes.io/component"] == "proxy"


def test_proxy_reads_endpoints_only_where_the_provisioner_binds_it() -> None:
    manifests = render({})
    rules = yaml.safe_load((CHART_DIR / "files" / "rbac-rules.yaml").read_text())["proxy"]
    role = find(manifests, "ClusterRole", "gp-gpuportal-proxy")
    assert role["rules"] == rules
    verbs = {verb for rule in role["rules"] for verb in rule["verbs"]}
    assert verbs == {"get", "list", "watch"}
    resources = {r for rule in role["rules"] for r in rule["resources"]}
    assert resources == {"services", "endpoints", "endpointslices"}
    # Nothing cluster-wide: no ClusterRoleBinding names the proxy's role or account.
    for binding in (m.obj for m in manifests if m.kind in {"ClusterRoleBinding", "RoleBinding"}):
        assert binding["roleRef"]["name"] != "gp-gpuportal-proxy"
        assert all(s["name"] != "gp-gpuportal-proxy" for s in binding["subjects"])
    # The provisioner binds it in each team namespace: it is told the role and the account, and may bind it.
    config = next(m.obj for m in manifests if m.kind == "ConfigMap" and "KUBE_PROXY_CLUSTERROLE" in m.obj["data"])
    assert config["data"]["KUBE_PROXY_CLUSTERROLE"] == "gp-gpuportal-proxy"
    assert config["data"]["KUBE_PROXY_SERVICE_ACCOUNT"] == "portal/gp-gpuportal-proxy"
    provisioner = find(manifests, "ClusterRole", "gp-gpuportal-provisioner")
    [bind] = [r for r in provisioner["rules"] if "bind" in r["verbs"]]
    assert "gp-gpuportal-proxy" in bind["resourceNames"]
    # Without the proxy, no account to bind.
    off = render({"proxy": {"enabled": False}})
    config = next(m.obj for m in off if m.kind == "ConfigMap" and "KUBE_PROXY_CLUSTERROLE" in m.obj["data"])
    assert config["data"]["KUBE_PROXY_SERVICE_ACCOUNT"] == ""


def test_ingress_sends_w_to_the_proxy_and_the_rest_to_the_web() -> None:
    manifests = render({"ingress": {"enabled": True, "hosts": [{"host": "gpus.example.org", "paths": ["/"]}]}})
    [ingress] = [m.obj for m in manifests if m.kind == "Ingress"]
    paths = {p["path"]: p["backend"]["service"]["name"] for p in ingress["spec"]["rules"][0]["http"]["paths"]}
    assert paths == {"/": "gp-gpuportal-web", "/w/": "gp-gpuportal-proxy"}


def test_proxy_can_be_left_out() -> None:
    manifests = render({"proxy": {"enabled": False}, "ingress": {"enabled": True}})
    assert not _by_component(manifests, "Deployment", "proxy")
    [ingress] = [m.obj for m in manifests if m.kind == "Ingress"]
    assert all(p["path"] != "/w/" for p in ingress["spec"]["rules"][0]["http"]["paths"])


def test_a_separate_origin_gets_its_own_host_and_the_portals_host_loses_w() -> None:
    values = {
        "ingress": {"enabled": True, "hosts": [{"host": "gpus.example.org", "paths": ["/"]}]},
        "proxy": {"origin": "https://apps.example.org"},
    }
    manifests = render(values)
    [ingress] = [m.obj for m in manifests if m.kind == "Ingress"]
    routes = {
        rule["host"]: {p["path"]: p["backend"]["service"]["name"] for p in rule["http"]["paths"]}
        for rule in ingress["spec"]["rules"]
    }
    assert routes == {"gpus.example.org": {"/": "gp-gpuportal-web"}, "apps.example.org": {"/": "gp-gpuportal-proxy"}}
    config = next(m.obj for m in manifests if m.kind == "ConfigMap" and "PROXY_ORIGIN" in m.obj.get("data", {}))
    assert config["data"]["PROXY_ORIGIN"] == "https://apps.example.org"
    wildcard = render({**values, "proxy": {"origin": "https://{uid}.apps.example.org"}})
    [ingress] = [m.obj for m in wildcard if m.kind == "Ingress"]
    assert [rule["host"] for rule in ingress["spec"]["rules"]] == ["gpus.example.org", "*.apps.example.org"]


def test_an_origin_with_a_path_is_refused_by_the_schema() -> None:
    assert "origin" in render_error({"proxy": {"origin": "https://apps.example.org/w"}})
