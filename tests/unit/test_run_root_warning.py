"""`make run` as root: Celery's long "superuser privileges" warning is silenced for its workers, and only that
warning (devtools/run.py ROOT_WARNING_FILTER); the workers accept JSON only, which is why it is harmless there."""

from __future__ import annotations

import subprocess
import sys

from django.conf import settings

from devtools import run

CHECK = """
import warnings
from celery.exceptions import SecurityWarning
from celery.platforms import check_privileges
check_privileges(["json"])  # as the worker does at start
warnings.warn(SecurityWarning("any other security warning"))
"""


def test_the_workers_accept_json_only():
    assert settings.CELERY_ACCEPT_CONTENT == ["json"]


def test_as_root_the_workers_start_without_the_root_warning_and_keep_every_other(monkeypatch):
    monkeypatch.setattr(run.os, "geteuid", lambda: 0)
    argv = run.celery_argv(sys.executable, ["-A", "portal", "worker"])
    assert argv == [sys.executable, "-W", run.ROOT_WARNING_FILTER, "-m", "celery", "-A", "portal", "worker"]
    # The filter itself, on Celery's own check (which warns only when this process is root).
    shown = subprocess.run([*argv[:3], "-c", CHECK], capture_output=True, text=True, check=True).stderr
    assert "superuser privileges" not in shown
    assert "any other security warning" in shown


def test_not_root_nothing_is_filtered(monkeypatch):
    monkeypatch.setattr(run.os, "geteuid", lambda: 1000)
    assert run.celery_argv("python", ["-A", "portal", "beat"]) == ["python", "-m", "celery", "-A", "portal", "beat"]
