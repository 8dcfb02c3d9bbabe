"""What benchmark modules share: Django set up on the run's database, and a lazily started cluster."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Any


class BenchContext:
    def __init__(self) -> None:
        self._cluster: Any = None
        self._stack = contextlib.ExitStack()
        self.work_dir = Path(tempfile.mkdtemp(prefix="gpuportal-bench-"))

    def django(self) -> None:
        """Configure Django against DATABASE_URL (PostgreSQL under `make bench`) and migrate it."""
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0, interactive=False)

    def cluster(self) -> Any:
        """The local GPU cluster, started on first use and stopped when the run ends."""
        if self._cluster is None:
            from localcluster import LocalCluster

            cluster = LocalCluster(state_dir=self.work_dir / "cluster")
            cluster.start()
            self._stack.callback(cluster.stop)
            self._cluster = cluster
        return self._cluster

    def close(self) -> None:
        self._stack.close()
