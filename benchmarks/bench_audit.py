"""Lighthouse scores of every portal page (`make audit`, or `make bench BENCH=audit`).

The portal runs as it does in production (gunicorn, DEBUG off, WhiteNoise serving the collected static files)
on the run's database, with the pages' data made as the accessibility gate makes it (tests/ui/
test_browser_a11y.py: PAGES, _workloads), signed in as a team manager through a session cookie. Lighthouse
(audit/, pinned in audit/package-lock.json) audits each page in that list with Debian's chromium, in its
default mode (a mid-range phone on slow 4G, simulated), and prints a line per page and the minimum of each
category: lighthouse_a11y_min, lighthouse_best_practices_min, lighthouse_perf_min (goals 100 / 100 / >= 95).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

from devtools.services import free_port, wait_for_port

REPO = Path(__file__).resolve().parent.parent
RUNNER = REPO / "audit" / "lighthouse.mjs"
LIGHTHOUSE = REPO / "audit" / "node_modules" / "lighthouse"
CHROMIUM = os.environ.get("CHROME_PATH", "/usr/bin/chromium")

FIGURES = (
    "lighthouse_pages",
    "lighthouse_benchmark_index_min",
    "lighthouse_a11y_min",
    "lighthouse_best_practices_min",
    "lighthouse_perf_min",
)


def seed() -> tuple[dict, object]:
    """The gate's data: a team with a manager, workloads in every state, a token and secrets."""
    import uuid

    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from identity.models import Membership, Role
    from jobs.models import AllowedRegistry, CatalogImage, GpuNode, GpuType, Quota, Team
    from tests.ui.test_browser_a11y import _workloads

    suffix = uuid.uuid4().hex[:6]
    now = timezone.now()
    p100, _ = GpuType.objects.get_or_create(
        slug="p100", defaults={"display_name": "Tesla P100", "node_label_value": "p100"}
    )
    k2, _ = GpuType.objects.get_or_create(slug="k2", defaults={"display_name": "Grid K2", "node_label_value": "k2"})
    GpuNode.objects.get_or_create(
        name=f"audit-{suffix}-p100",
        defaults={"gpu_type": p100, "gpus_allocatable": 4, "gpus_capacity": 4, "ready": True, "last_seen_at": now},
    )
    lab = Team.objects.create(name=f"Lab {suffix}", slug=f"lab-{suffix}")
    Quota.objects.create(team=lab, gpu_type=p100, max_gpus=2)
    Quota.objects.create(team=lab, gpu_type=k2, max_gpus=2)
    AllowedRegistry.objects.get_or_create(host="docker.io")
    CatalogImage.objects.get_or_create(
        reference="docker.io/library/python:3.12",
        defaults={"title": "Python 3.12", "suits": CatalogImage.Suits.BATCH, "default_command": ["python", "-c"]},
    )
    users = get_user_model()
    manager = users.objects.create_user(f"maria-{suffix}", f"maria-{suffix}@example.org", None)
    teammate = users.objects.create_user(f"tom-{suffix}", f"tom-{suffix}@example.org", None)
    Membership.objects.create(user=manager, team=lab, role=Role.MANAGER)
    Membership.objects.create(user=teammate, team=lab, role=Role.MEMBER)
    world = SimpleNamespace(team=lab, lab=lab, p100=p100, k2=k2, manager=manager, owner=manager, teammate=teammate)
    return _workloads(world), manager


def session_cookie(user) -> dict[str, str]:
    from django.conf import settings
    from django.test import Client

    client = Client()
    client.force_login(user)
    return {"name": settings.SESSION_COOKIE_NAME, "value": client.cookies[settings.SESSION_COOKIE_NAME].value}


def serve(work: Path, env: dict[str, str]) -> tuple[subprocess.Popen, str]:
    """gunicorn as the image runs it (portal/wsgi, gthread workers, WhiteNoise), DEBUG off, plain HTTP."""
    subprocess.run(
        [sys.executable, "manage.py", "collectstatic", "--noinput", "-v", "0"], cwd=REPO, env=env, check=True
    )
    port = free_port()
    log = open(work / "gunicorn.log", "ab")  # noqa: SIM115 - the child owns it
    process = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "portal.wsgi:application", "--bind", f"127.0.0.1:{port}",
         "--workers", "2", "--worker-class", "gthread", "--threads", "4", "--access-logfile", "-"],
        cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    wait_for_port(port, timeout=60, process=process, what="gunicorn")
    return process, f"http://127.0.0.1:{port}"


def run(ctx) -> Iterator[tuple[str, object]]:
    if not (LIGHTHOUSE.exists() and Path(CHROMIUM).exists()):
        raise RuntimeError("Lighthouse or chromium is missing: `make audit` installs both")
    ctx.django()
    from tests.ui.test_browser_a11y import PAGES

    # AUDIT_PAGES=dashboard,usage audits only those (a quick look while fixing one page).
    wanted = {n for n in os.environ.get("AUDIT_PAGES", "").split(",") if n}
    pages = [p for p in PAGES if not wanted or p.name in wanted]
    made, manager = seed()
    from django.conf import settings

    cookie = session_cookie(manager)
    work = Path(tempfile.mkdtemp(prefix="gpuportal-audit-"))
    env = {
        **os.environ,
        "DEBUG": "0",
        # The session was signed here: the server must hold the same key (DEBUG off insists on one).
        "SECRET_KEY": settings.SECRET_KEY,
        "ALLOWED_HOSTS": "127.0.0.1",
        "SECURE_COOKIES": "0",  # plain HTTP on loopback: secure-only cookies would never be sent
        "STATIC_ROOT": str(work / "static"),
        "PORTAL_VAR_DIR": str(work / "var"),
    }
    process, base = serve(work, env)
    try:
        plan = {
            "base": base,
            "cookies": [cookie],
            "pages": [
                {
                    "name": p.name,
                    "path": p.path(made),
                    "signed_in": p.signed_in,
                    "status": p.status,
                    "before": p.before or None,
                }
                for p in pages
            ],
        }
        plan_file = work / "plan.json"
        plan_file.write_text(json.dumps(plan))
        started = time.monotonic()
        done = subprocess.run(
            ["node", str(RUNNER), str(plan_file)], cwd=REPO, capture_output=True, text=True, check=False, timeout=1800
        )
        results = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
        if done.returncode != 0 or len(results) != len(pages):
            errors = [line for line in done.stderr.splitlines() if "Error" in line] or done.stderr.splitlines()[-3:]
            raise RuntimeError(f"lighthouse ended with {done.returncode} after {len(results)} pages: {errors[:3]}")
        print(f"# lighthouse: {len(results)} pages in {time.monotonic() - started:.0f} s", flush=True)
        print(f"# {'page':<22} {'a11y':>4} {'bp':>4} {'perf':>4} {'cpu':>5}  what cost points", flush=True)
        for r in results:
            lost = " ".join(r["a11y_lost"] + r["best_practices_lost"] + r["perf_lost"])
            scores = " ".join(f"{'-' if r[k] is None else r[k]:>4}" for k in ("a11y", "best_practices", "perf"))
            print(f"# {r['name']:<22} {scores} {r['benchmark_index']:>5}  {lost}", flush=True)
            if r["error"]:
                print(f"#   {r['name']}: {r['error']}", flush=True)
            if r["url"] and "/login/" in r["url"] and r["name"] != "sign-in":
                raise RuntimeError(f"{r['name']} was audited signed out ({r['url']})")
        yield "lighthouse_pages", len(results)
        # cpu: Lighthouse's benchmark index of this machine while it measured the page (a quiet desktop scores
        # about 1000 or more; below that the simulated phone's times, and so perf, are held down by the host).
        yield "lighthouse_benchmark_index_min", min(r["benchmark_index"] for r in results)
        for short in ("a11y", "best_practices", "perf"):
            yield f"lighthouse_{short}_min", min(r[short] if r[short] is not None else 0 for r in results)
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
        if not os.environ.get("AUDIT_REPORTS"):  # kept (with gunicorn.log) when reports are asked for
            shutil.rmtree(work, ignore_errors=True)
