"""The hand-offs that run a task as configured (a secret's write and removal, a namespace's provisioning,
an admin's workspace-data delete) find their task in a process that never imported jobs/tasks.py, as the
web's is: services hand work over through dispatch and import no task module themselves."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

WEB_PROCESS = """
import sys
import django
django.setup()
from jobs.services import dispatch
assert "jobs.tasks" not in sys.modules, "the web process imported the tasks before any hand-off"
for name in ("jobs.tasks.write_secret", "jobs.tasks.remove_secret", "jobs.tasks.provision_namespace",
             "jobs.tasks.delete_workspace_data"):
    print(dispatch._task(name).name)
"""


def test_a_web_process_finds_the_tasks_it_hands_work_to():
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "portal.settings", "DEBUG": "1"}
    done = subprocess.run(
        [sys.executable, "-c", WEB_PROCESS], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == [
        "jobs.tasks.write_secret",
        "jobs.tasks.remove_secret",
        "jobs.tasks.provision_namespace",
        "jobs.tasks.delete_workspace_data",
    ]
