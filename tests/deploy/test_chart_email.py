"""The chart's outgoing-mail values: EMAIL_URL reaches every portal process from a Secret, never a ConfigMap."""

from __future__ import annotations

from tests.deploy.helm import find, render, render_error
from tests.deploy.test_chart_render import config_map, deployment, env_of, pod_specs

URL = "smtp+tls://gpus%40example.org:p%40ss@mail.example.org:587"


def test_email_url_in_values_goes_through_the_charts_secret() -> None:
    manifests = render({"email": {"url": URL, "from": "GPU Portal <gpus@example.org>"}})
    assert find(manifests, "Secret", "gp-gpuportal")["stringData"]["EMAIL_URL"] == URL
    config = config_map(manifests)
    assert config["DEFAULT_FROM_EMAIL"] == "GPU Portal <gpus@example.org>"
    assert URL not in str(config)
    for component in ("web", "worker", "beat", "tracker"):
        [container] = deployment(manifests, component)["spec"]["template"]["spec"]["containers"]
        assert env_of(container)["EMAIL_URL"] == {"secretKeyRef": {"name": "gp-gpuportal", "key": "EMAIL_URL"}}


def test_email_url_from_an_existing_secret() -> None:
    manifests = render({"email": {"existingSecret": "mail", "existingSecretKey": "url"}})
    assert "EMAIL_URL" not in find(manifests, "Secret", "gp-gpuportal")["stringData"]
    for where, spec in pod_specs(manifests).items():
        if where.startswith(("StatefulSet", "DaemonSet")) or where.endswith("-admission-guard"):
            continue  # PostgreSQL, Redis, the agent, the admission guard: no mail
        assert env_of(spec["containers"][0])["EMAIL_URL"] == {"secretKeyRef": {"name": "mail", "key": "url"}}, where


def test_no_email_configured_means_no_email_url() -> None:
    manifests = render({})
    [container] = deployment(manifests, "worker")["spec"]["template"]["spec"]["containers"]
    assert "EMAIL_URL" not in env_of(container)
    assert "DEFAULT_FROM_EMAIL" not in config_map(manifests)


def test_an_email_url_that_is_not_smtp_is_refused_naming_the_value() -> None:
    assert "email" in render_error({"email": {"url": "imap://mail.example.org"}})


def test_oidc_values_reach_the_portal_with_the_client_secret_from_a_secret() -> None:
    values = {
        "oidc": {
            "enabled": True,
            "issuer": "https://login.uni.example/realms/research",
            "clientId": "gpuportal",
            "clientSecret": "s3cret-client",
            "providerName": "Uni Login",
            "scopes": ["openid", "email", "profile", "groups"],
        }
    }
    manifests = render(values)
    config = config_map(manifests)
    assert config["OIDC_ISSUER"] == "https://login.uni.example/realms/research"
    assert (config["OIDC_CLIENT_ID"], config["OIDC_SCOPES"], config["OIDC_PROVIDER_NAME"]) == (
        "gpuportal",
        "openid,email,profile,groups",
        "Uni Login",
    )
    assert "s3cret-client" not in str(config)
    assert find(manifests, "Secret", "gp-gpuportal")["stringData"]["OIDC_CLIENT_SECRET"] == "s3cret-client"
    [container] = deployment(manifests, "web")["spec"]["template"]["spec"]["containers"]
    assert env_of(container)["OIDC_CLIENT_SECRET"] == {
        "secretKeyRef": {"name": "gp-gpuportal", "key": "OIDC_CLIENT_SECRET"}
    }
    assert "OIDC_ISSUER" not in config_map(render({}))


def test_oidc_without_issuer_or_secret_is_refused_naming_the_value() -> None:
    assert "oidc.issuer" in render_error({"oidc": {"enabled": True, "clientId": "x", "clientSecret": "y"}})
    assert "oidc.clientSecret" in render_error(
        {"oidc": {"enabled": True, "issuer": "https://id.example", "clientId": "x"}}
    )
