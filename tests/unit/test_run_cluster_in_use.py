"""A second `make run` in the same checkout (on another PORT) finds the first one's cluster state directory
locked: it says so in words that point at a second checkout, rather than "real nodes did not start" and a
fix (`localcluster down`) that would stop the first portal's cluster."""

from __future__ import annotations

import contextlib
import fcntl

import pytest

from devtools import run
from devtools.services import ServiceError


def test_a_state_directory_another_run_holds_is_refused_before_anything_starts(tmp_path, monkeypatch):
    started = []
    monkeypatch.setattr(run.subprocess, "run", lambda *a, **k: started.append(a))  # build.sh: never reached
    with open(tmp_path / "lock", "a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as the first run's cluster holds it
        with pytest.raises(ServiceError) as refused, contextlib.ExitStack() as stack:
            run.start_cluster({"LOCALCLUSTER_STATE_DIR": str(tmp_path)}, stack)
    message = str(refused.value)
    assert f"{tmp_path} is in use by another `make run`" in message
    assert "git worktree add" in message  # a second portal: a checkout of its own
    assert "localcluster down" not in message
    assert started == []
