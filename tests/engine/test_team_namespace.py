"""A team namespace as the provisioner makes it: pure renderers compared whole, and the name check that
keeps the provisioner (the one identity that may create namespaces and bindings) inside the prefix."""

from __future__ import annotations

import pytest
from kubernetes.client import ApiClient

from jobs.kube import objects
from jobs.services.provisioning import NamespaceRefused, namespace_name_check, team_namespace_objects
from portal.env import ConfigError, env_dict


def as_dict(obj):
    return ApiClient().sanitize_for_serialization(obj)


def test_team_namespace_enforces_baseline_and_warns_restricted():
    ns = as_dict(objects.make_namespace("gpuportal-vision", team_slug="vision", instance="ci"))
    assert ns == {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": "gpuportal-vision",
            "labels": {
                "app.kubernetes.io/managed-by": "gpuportal",
                "gpuportal.dev/team": "vision",
                "gpuportal.dev/instance": "ci",
                "pod-security.kubernetes.io/enforce": "baseline",
                "pod-security.kubernetes.io/enforce-version": "latest",
                "pod-security.kubernetes.io/warn": "restricted",
                "pod-security.kubernetes.io/warn-version": "latest",
            },
        },
    }


def test_limit_range_gives_every_container_an_ephemeral_storage_limit():
    assert as_dict(objects.make_limit_range("gpuportal-vision", ephemeral_storage="20Gi")) == {
        "apiVersion": "v1",
        "kind": "LimitRange",
        "metadata": {
            "name": "gpuportal-limits",
            "namespace": "gpuportal-vision",
            "labels": {"app.kubernetes.io/managed-by": "gpuportal"},
        },
        "spec": {
            "limits": [
                {
                    "type": "Container",
                    "default": {"ephemeral-storage": "20Gi"},
                    "defaultRequest": {"ephemeral-storage": "20Gi"},
                    "max": {"ephemeral-storage": "20Gi"},
                }
            ]
        },
    }


RULES = objects.NetworkRules(
    proxy_labels={"app.kubernetes.io/instance": "gp", "app.kubernetes.io/component": "proxy"},
    portal_namespace_labels={"kubernetes.io/metadata.name": "portal"},
    egress_allow=("0.0.0.0/0",),
    egress_deny=("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"),
)


def test_network_policy_lets_in_only_the_namespace_and_the_portals_proxy():
    policy = as_dict(objects.make_network_policy("gpuportal-vision", RULES))
    assert policy["metadata"]["name"] == "gpuportal-isolation"
    spec = policy["spec"]
    assert spec["podSelector"] == {}
    assert spec["policyTypes"] == ["Ingress", "Egress"]
    assert spec["ingress"] == [
        {
            "from": [
                {"podSelector": {}},
                {
                    "podSelector": {
                        "matchLabels": {"app.kubernetes.io/instance": "gp", "app.kubernetes.io/component": "proxy"}
                    },
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "portal"}},
                },
            ]
        }
    ]


def test_network_policy_egress_is_dns_the_namespace_and_the_internet_without_metadata_or_private_ranges():
    spec = as_dict(objects.make_network_policy("gpuportal-vision", RULES))["spec"]
    dns, same_namespace, outside = spec["egress"]
    assert dns == {
        "to": [{"namespaceSelector": {}}],
        "ports": [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}],
    }
    assert same_namespace == {"to": [{"podSelector": {}}]}
    assert outside == {
        "to": [
            {
                "ipBlock": {
                    "cidr": "0.0.0.0/0",
                    "except": ["10.0.0.0/8", "169.254.169.254/32", "172.16.0.0/12", "192.168.0.0/16"],
                }
            }
        ]
    }


def test_the_metadata_address_stays_denied_whatever_the_admin_allows():
    rules = objects.NetworkRules(
        proxy_labels={}, portal_namespace_labels={}, egress_allow=("169.0.0.0/8",), egress_deny=()
    )
    [block] = as_dict(objects.make_network_policy("gpuportal-x", rules))["spec"]["egress"][2]["to"]
    assert block["ipBlock"] == {"cidr": "169.0.0.0/8", "except": ["169.254.169.254/32"]}
    # An allow list that does not contain it needs no exception.
    narrow = objects.NetworkRules(
        proxy_labels={}, portal_namespace_labels={}, egress_allow=("8.8.8.8/32",), egress_deny=()
    )
    [block] = as_dict(objects.make_network_policy("gpuportal-x", narrow))["spec"]["egress"][2]["to"]
    assert block["ipBlock"] == {"cidr": "8.8.8.8/32"}


@pytest.mark.parametrize(
    "namespace",
    [
        "kube-system",
        "default",
        "kube-public",
        "other-release-team",
        "gpuportal-",
        "gpuportalx-team",
        "gpuportal-Bad_Name",
    ],
)
def test_the_provisioner_refuses_any_name_outside_its_prefix(settings, namespace):
    settings.KUBE_NAMESPACE_PREFIX = "gpuportal-"
    with pytest.raises(NamespaceRefused):
        namespace_name_check(namespace)


def test_the_provisioner_refuses_everything_without_a_prefix(settings):
    settings.KUBE_NAMESPACE_PREFIX = ""
    with pytest.raises(NamespaceRefused, match="KUBE_NAMESPACE_PREFIX"):
        namespace_name_check("kube-system")


def test_the_provisioner_accepts_its_own_team_namespaces(settings):
    settings.KUBE_NAMESPACE_PREFIX = "gpuportal-"
    assert namespace_name_check("gpuportal-vision") == "gpuportal-vision"


@pytest.mark.django_db
def test_a_team_namespace_is_made_of_namespace_quota_limits_policy_and_three_bindings(settings):
    from tests.engine.factories import TeamFactory

    settings.KUBE_NAMESPACE_PREFIX = "gpuportal-"
    settings.KUBE_SERVICE_ACCOUNT = "portal/gp-gpuportal"
    settings.KUBE_WEB_SERVICE_ACCOUNT = "portal/gp-gpuportal-web"
    settings.KUBE_WORKLOADS_CLUSTERROLE = "gp-gpuportal-workloads"
    settings.KUBE_READER_CLUSTERROLE = "gp-gpuportal-reader"
    settings.KUBE_PROXY_SERVICE_ACCOUNT = "portal/gp-gpuportal-proxy"
    settings.KUBE_PROXY_CLUSTERROLE = "gp-gpuportal-proxy"
    made = team_namespace_objects(TeamFactory(slug="vision"))
    assert [(o.kind, o.metadata.name) for o in made] == [
        ("Namespace", "gpuportal-vision"),
        ("ResourceQuota", "gpuportal-gpus"),
        ("LimitRange", "gpuportal-limits"),
        ("NetworkPolicy", "gpuportal-isolation"),
        ("RoleBinding", "gpuportal-workloads"),
        ("RoleBinding", "gpuportal-reader"),
        ("RoleBinding", "gpuportal-proxy"),
    ]
    bindings = {o.metadata.name: as_dict(o) for o in made if o.kind == "RoleBinding"}
    assert bindings["gpuportal-workloads"]["roleRef"]["name"] == "gp-gpuportal-workloads"
    assert bindings["gpuportal-workloads"]["subjects"] == [
        {"kind": "ServiceAccount", "name": "gp-gpuportal", "namespace": "portal"}
    ]
    assert bindings["gpuportal-reader"]["roleRef"]["name"] == "gp-gpuportal-reader"
    assert bindings["gpuportal-reader"]["subjects"] == [
        {"kind": "ServiceAccount", "name": "gp-gpuportal-web", "namespace": "portal"}
    ]
    # The proxy reads services and EndpointSlices here, and (no ClusterRoleBinding) nowhere else.
    assert bindings["gpuportal-proxy"]["roleRef"]["name"] == "gp-gpuportal-proxy"
    assert bindings["gpuportal-proxy"]["subjects"] == [
        {"kind": "ServiceAccount", "name": "gp-gpuportal-proxy", "namespace": "portal"}
    ]


def test_env_dict_reads_label_selectors_and_names_a_bad_item(monkeypatch):
    monkeypatch.setenv("LABELS", "a=1, b.io/c=proxy")
    assert env_dict("LABELS") == {"a": "1", "b.io/c": "proxy"}
    monkeypatch.setenv("LABELS", "")
    assert env_dict("LABELS", {"x": "y"}) == {}
    monkeypatch.setenv("LABELS", "novalue")
    with pytest.raises(ConfigError, match="LABELS"):
        env_dict("LABELS")
