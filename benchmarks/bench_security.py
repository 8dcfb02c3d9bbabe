"""Hostile input replayed against the running app: the REST API, the pages' forms, the agent ingest
endpoint (through Django's full middleware stack, DEBUG off, exceptions turned into responses as in
production) and the service proxy (served by uvicorn on a loopback port, as `python -m proxy` runs it).

Lines printed:
  bad_inputs_tried   hostile requests in the catalogue below, each actually sent and answered
  server_errors      how many of them were answered 5xx or not at all (must be 0: bad input is a 4xx
                     naming the field, never a server error)

Every 5xx is also printed on stderr with the request, so a regression says where it is.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

FIGURES = ("bad_inputs_tried", "server_errors")

HOSTILE_VALUES: list[Any] = [
    None, "", " ", "x" * 100_000, -1, 0, 2**63, -(2**63), 1.5, float("1e308"), [], {}, [[[]]], {"a": {"b": {}}},
    "\x00", "\ud800", "=HYPERLINK(\"http://evil\")", "../../etc/passwd", True, "<script>alert(1)</script>",
    "' OR 1=1--", "${jndi:ldap://x}", "\r\nSet-Cookie: a=b", "ünïcödé ✓", "%00", "12abc",
]  # fmt: skip
SPEC_FIELDS = ["name", "kind", "image", "catalog_image", "gpu_type", "gpu_count", "command", "args", "env", "port",
               "time_limit_seconds", "priority", "team", "shared_with_team", "restartable"]  # fmt: skip
QUERY_PARAMS = ["state", "gpu_type", "kind", "created_after", "created_before", "page_size", "cursor", "ordering",
                "team", "owner", "search"]  # fmt: skip
HOSTILE_QUERY = ["", "x" * 5000, "-1", "99999999999999999999", "%00", "\u0000", "../", "'--", "2026-13-45", "[]"]
HOSTILE_UIDS = ["..", "%2e%2e", "x" * 300, "ÄÖÜ", "0" * 16, "%00", "a b", "' OR 1=1", "-1", "🙂"]


def _json(value: Any) -> str:
    # ASCII escapes: a lone surrogate travels as "\\ud800", as any JSON client would send it.
    return json.dumps(value, ensure_ascii=True, allow_nan=True)


class Tally:
    def __init__(self) -> None:
        self.tried = 0
        self.errors = 0

    def check(self, what: str, send: Callable[[], int]) -> None:
        self.tried += 1
        try:
            status = send()
        except Exception as exc:  # no answer at all counts as a server error too
            status = 599
            what = f"{what} ({type(exc).__name__}: {exc})"
        if status >= 500:
            self.errors += 1
            print(f"# server error {status}: {what[:300]}", file=sys.stderr, flush=True)


def _setup() -> dict[str, Any]:
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from api.tokens import token_create
    from identity.models import Membership
    from jobs.models import AllowedRegistry, GpuNode, GpuType, Kind, Quota, State, Team, Workload
    from telemetry.services.tokens import agent_token_issue

    run = uuid.uuid4().hex[:6]
    team, other = (Team.objects.create(name=f"Hostile {run} {n}", slug=f"hostile-{run}-{n}") for n in ("a", "b"))
    gpu_type = GpuType.objects.create(
        slug=f"hostile-{run}", display_name="Hostile GPU", node_label_value=f"hostile-{run}"
    )
    GpuNode.objects.create(
        name=f"hostile-node-{run}",
        gpu_type=gpu_type,
        gpus_capacity=4,
        gpus_allocatable=4,
        ready=True,
        last_seen_at=timezone.now(),
    )
    AllowedRegistry.objects.get_or_create(host="docker.io")
    users = {}
    for name, which in (("member", team), ("outsider", other)):
        user = get_user_model().objects.create_user(f"hostile-{run}-{name}", password="correct horse battery")
        Membership.objects.create(user=user, team=which)
        Quota.objects.create(team=which, gpu_type=gpu_type, max_gpus=2)
        users[name] = user
    fields = {"kind": Kind.SERVICE, "image": "docker.io/x:1", "gpu_type": gpu_type, "gpu_count": 1, "port": 8888,
              "time_limit_seconds": 3600, "state": State.QUEUED}  # fmt: skip
    mine = Workload.objects.create(team=team, owner=users["member"], name="mine", **fields)
    theirs = Workload.objects.create(team=other, owner=users["outsider"], name="theirs", **fields)
    return {
        "run": run,
        "users": users,
        "token": token_create(user=users["member"], name="hostile").raw,
        "agent_token": agent_token_issue(name="hostile", node=f"hostile-node-{run}")[1],
        "node": f"hostile-node-{run}",
        "mine": mine,
        "theirs": theirs,
        "gpu_type": gpu_type,
    }


def _api_cases(world: dict[str, Any], tally: Tally) -> None:
    from django.test import Client

    api = Client(raise_request_exception=False, HTTP_AUTHORIZATION=f"Bearer {world['token']}")
    valid = {"image": "docker.io/x:1", "gpu_type": world["gpu_type"].slug, "name": "ok"}
    for field in SPEC_FIELDS:
        for value in HOSTILE_VALUES:
            body = _json({**valid, field: value})
            tally.check(
                f"POST workloads {field}={value!r:.40}",
                lambda body=body: api.post("/api/v1/workloads/", body, content_type="application/json").status_code,
            )
    for raw in [
        "not json",
        "[1,2]",
        '"string"',
        "{",
        "",
        "null",
        "{" * 10_000,
        '{"env": ' + "[" * 5000 + "]" * 5000 + "}",
    ]:
        tally.check(
            f"POST workloads body {raw[:30]!r}",
            lambda raw=raw: api.post("/api/v1/workloads/", raw, content_type="application/json").status_code,
        )
    tally.check(
        "POST workloads 2 MB",
        lambda: api.post("/api/v1/workloads/", "x" * (2 << 20), content_type="application/json").status_code,
    )
    tally.check("POST workloads form-encoded", lambda: api.post("/api/v1/workloads/", {"image": "x"}).status_code)
    tally.check(
        "POST workloads Idempotency-Key huge",
        lambda: (
            api.post(
                "/api/v1/workloads/", _json(valid), content_type="application/json", HTTP_IDEMPOTENCY_KEY="k" * 10_000
            ).status_code
        ),
    )
    for param in QUERY_PARAMS:
        for value in HOSTILE_QUERY:
            tally.check(
                f"GET workloads ?{param}={value:.30}",
                lambda p=param, v=value: api.get("/api/v1/workloads/", {p: v}).status_code,
            )
    for uid in [*HOSTILE_UIDS, world["theirs"].uid]:
        for suffix in ("", "logs/", "events/", "cancel/"):
            method = api.post if suffix == "cancel/" else api.get
            tally.check(
                f"{suffix or 'GET'} workload {uid:.30}",
                lambda u=uid, s=suffix, m=method: m(f"/api/v1/workloads/{u}/{s}").status_code,
            )
    for param, values in {
        "tail": ["-1", "0", "10" * 20, "abc"],
        "since": ["-5", "1e9", "x"],
        "follow": ["maybe", "1" * 100],
    }.items():
        for value in values:
            tally.check(
                f"logs ?{param}={value:.20}",
                lambda p=param, v=value: api.get(f"/api/v1/workloads/{world['mine'].uid}/logs/", {p: v}).status_code,
            )
    for param in ("start", "end", "group_by", "user", "team", "format"):
        for value in HOSTILE_QUERY:
            tally.check(
                f"usage ?{param}={value:.30}", lambda p=param, v=value: api.get("/api/v1/usage/", {p: v}).status_code
            )
    for header in ("", "Bearer", "Bearer gpp_" + "x" * 500, "Basic Zm9vOmJhcg==", "Bearer \x00", "Token abc"):
        anonymous = Client(raise_request_exception=False)
        tally.check(
            f"auth {header[:20]!r}",
            lambda h=header, c=anonymous: c.get("/api/v1/workloads/", HTTP_AUTHORIZATION=h).status_code,
        )


def _ingest_cases(world: dict[str, Any], tally: Tally) -> None:
    from django.test import Client

    from agent.report import build_report
    from agent.simulated import SimulatedSampler

    client = Client(raise_request_exception=False)
    url = "/api/v1/agent/reports"

    def report(node: str, gpus: int = 4, at: datetime | None = None) -> dict[str, Any]:
        sampler = SimulatedSampler(node, gpus, "Tesla P100", "12.2", busy_fn=dict, seed=1)
        return build_report(
            sampler.sample(),
            node=node,
            simulated=True,
            timestamp=at or datetime.now(UTC),
            interval_seconds=5.0,
            agent_version="0",
        ).to_dict()

    def post(body: Any, token: str | None = world["agent_token"]) -> int:
        data = body if isinstance(body, str) else json.dumps(body)
        headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}
        return client.post(url, data, content_type="application/json", **headers).status_code

    node = world["node"]
    bodies: list[Any] = [
        report("some-other-node"), report(node, gpus=500), report(node, at=datetime.now(UTC) + timedelta(days=1)),
        report(node, at=datetime(1970, 1, 1, tzinfo=UTC)), "not json", "[]", "{}", "x" * (2 << 20),
    ]  # fmt: skip
    for key in (
        "schema",
        "node",
        "simulated",
        "timestamp",
        "interval_seconds",
        "agent_version",
        "cuda_driver_version",
        "gpus",
    ):
        for value in HOSTILE_VALUES:
            body = report(node)
            body[key] = value
            bodies.append(body)
    for gpu_key in ("index", "utilization_gpu_percent", "memory_used_bytes", "processes", "pod_uids", "state"):
        for value in HOSTILE_VALUES[:14]:
            body = report(node)
            body["gpus"][0][gpu_key] = value
            bodies.append(body)
    for body in bodies:
        tally.check(
            "ingest " + (body[:20] if isinstance(body, str) else str(body.get("node"))[:20]), lambda b=body: post(b)
        )
    for token in (None, "gpa_wrong", "gpa_" + "x" * 300, "\x00"):
        tally.check(f"ingest token {token!r:.20}", lambda t=token: post(report(node), t))
    tally.check("ingest GET", lambda: client.get(url).status_code)


def _form_cases(world: dict[str, Any], tally: Tally) -> None:
    from django.test import Client

    page = Client(raise_request_exception=False)
    page.force_login(world["users"]["member"])
    launch = {
        "kind": "batch",
        "image": "docker.io/x:1",
        "gpu_type": world["gpu_type"].slug,
        "gpu_count": "1",
        "name": "ok",
    }
    for field in ("name", "kind", "image", "catalog_image", "gpu_type", "gpu_count", "command", "args", "port",
                  "time_limit_hours", "priority", "env-TOTAL_FORMS", "env-0-name", "env-0-value", "team"):  # fmt: skip
        for value in HOSTILE_VALUES:
            # A browser cannot send a lone surrogate (it is not UTF-8); it sends the replacement character.
            text = "" if value is None else str(value).replace("\ud800", "\ufffd")
            tally.check(
                f"launch form {field}", lambda f=field, v=text: page.post("/launch/", {**launch, f: v}).status_code
            )
    for name in ["", "x" * 10_000, "<script>", "=cmd", "\r\n"]:
        tally.check("token form", lambda n=name: page.post("/profile/tokens/", {"name": n}).status_code)
    anonymous = Client(raise_request_exception=False)
    for username in ["", "x" * 10_000, "admin' --", "ünï", "a\r\nb", world["users"]["member"].username]:
        for path in ("/login/", "/admin/login/"):
            tally.check(
                f"sign-in {path}",
                lambda u=username, p=path: anonymous.post(p, {"username": u, "password": "wrong"}).status_code,
            )
    for path in ["/workloads/" + u + "/" for u in [*HOSTILE_UIDS, world["theirs"].uid]] + [
        "/usage/?start=x&end=-1",
        "/usage/?format=%00",
        "/nodes/?x=" + "y" * 5000,
    ]:
        tally.check(f"page {path[:40]}", lambda p=path: page.get(p).status_code)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _proxy_cases(world: dict[str, Any], tally: Tally) -> None:
    import requests
    import uvicorn
    from django.test import Client

    from proxy.app import ServiceProxy

    class Server(uvicorn.Server):
        def install_signal_handlers(self) -> None:
            pass

    port = _free_port()
    app = ServiceProxy(endpoints=lambda namespace, service: None)
    server = Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error", lifespan="on", proxy_headers=False)
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    session = Client()
    session.force_login(world["users"]["member"])
    cookie = {"sessionid": session.cookies["sessionid"].value}
    base = f"http://127.0.0.1:{port}"
    # The member's own (queued) service answers 503 "not running yet" by design; the hostile paths aim at
    # other teams' services, ids that are none, and escapes out of /w/.
    paths = [f"/w/{world['theirs'].uid}/", f"/w/{world['theirs'].uid}/api/kernels", "/w/", "/w/%2e%2e/admin/",
             "/w/../admin/", "/w/" + "a" * 5000 + "/", "/w/%00/", f"/w/{world['theirs'].uid}/../../admin/",
             f"/w/{world['theirs'].uid}/" + "%2F" * 200]  # fmt: skip
    try:
        for path in paths:
            for cookies in (cookie, {}, {"sessionid": "forged"}):
                tally.check(
                    f"proxy GET {path[:40]}",
                    lambda p=path, c=cookies: (
                        requests.get(base + p, cookies=c, timeout=10, allow_redirects=False).status_code
                    ),
                )
        for name, value in (("X-Forwarded-Proto", "https"), ("X-Forwarded-For", "127.0.0.1"), ("Host", "evil.example"),
                            ("Cookie", "sessionid=" + "x" * 8000), ("X-Forwarded-Host", "evil")):  # fmt: skip
            tally.check(
                f"proxy header {name}",
                lambda n=name, v=value: (
                    requests.get(
                        f"{base}/w/{world['theirs'].uid}/",
                        headers={n: v},
                        cookies=cookie,
                        timeout=10,
                        allow_redirects=False,
                    ).status_code
                ),
            )
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def run(ctx) -> Iterator[tuple[str, int]]:
    ctx.django()
    import logging

    from django.conf import settings
    from django.test.utils import override_settings

    for name in ("django.request", "jobs.services.dispatch", "axes", "proxy"):
        logging.getLogger(name).setLevel(logging.CRITICAL)  # the catalogue's refusals are expected
    rest = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {"token": "1000000/min", "user": "1000000/min"}}
    storages = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }
    with override_settings(
        ALLOWED_HOSTS=["*"], DEBUG=False, REST_FRAMEWORK=rest, STORAGES=storages, AXES_FAILURE_LIMIT=1000,
        PASSWORD_HASHERS=["django.contrib.auth.hashers.MD5PasswordHasher"],
    ):  # fmt: skip
        world = _setup()
        tally = Tally()
        _api_cases(world, tally)
        _ingest_cases(world, tally)
        _form_cases(world, tally)
        _proxy_cases(world, tally)
    yield "bad_inputs_tried", tally.tried
    yield "server_errors", tally.errors
