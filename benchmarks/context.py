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
        self._durability_said = False
        self.work_dir = Path(tempfile.mkdtemp(prefix="gpuportal-bench-"))
        self.status_log = self.work_dir / "simulator-status-writes.jsonl"

    def django(self) -> None:
        """Configure Django against DATABASE_URL (PostgreSQL under `make bench`) and migrate it."""
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0, interactive=False)
        if not self._durability_said:
            from django.db import connection

            with connection.cursor() as cursor:
                settings = {}
                for name in ("fsync", "synchronous_commit", "full_page_writes"):
                    cursor.execute(f"SHOW {name}")
                    settings[name] = cursor.fetchone()[0]
            # Printed with the figures: ratios against the API server (etcd fsyncs) are only fair when
            # PostgreSQL is as durable (`make bench` sets GPUPORTAL_PG_DURABLE=1).
            print("# postgresql " + " ".join(f"{k}={v}" for k, v in settings.items()), flush=True)
            self._durability_said = True

    def cluster(self) -> Any:
        """The local GPU cluster, started on first use and stopped when the run ends."""
        if self._cluster is None:
            from localcluster import LocalCluster

            cluster = LocalCluster(state_dir=self.work_dir / "cluster")
            # The node simulator logs the instant of each successful pod status write (tracking lag).
            os.environ["GPUPORTAL_SIM_STATUS_LOG"] = str(self.status_log)
            try:
                cluster.start()
            finally:
                os.environ.pop("GPUPORTAL_SIM_STATUS_LOG", None)
            self._stack.callback(cluster.stop)
            self._cluster = cluster
        return self._cluster

    def close(self) -> None:
        self._stack.close()
