"""`manage.py telemetry_local_cluster`: make the local GPU cluster's simulator push simulated GPU readings
to this portal (or stop it with --disconnect)."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from telemetry.services.local_cluster import local_cluster_connect, local_cluster_disconnect


class Command(BaseCommand):
    help = "Point the local GPU cluster's node simulator at this portal for simulated GPU telemetry."

    def add_arguments(self, parser):
        parser.add_argument("--state-dir", type=Path, default=settings.BASE_DIR / "var" / "cluster")
        parser.add_argument("--portal-url", default=settings.SITE_URL)
        parser.add_argument("--interval", type=float, default=5.0, help="seconds between reports")
        parser.add_argument("--name", default="portal", help="the target's name (one file per portal)")
        parser.add_argument("--disconnect", action="store_true", help="stop publishing to this target")

    def handle(self, *args, **options):
        state_dir: Path = options["state_dir"]
        if not (state_dir / "simulator.json").exists():
            raise CommandError(f"no local GPU cluster in {state_dir} (start one with `make cluster-up`)")
        if options["disconnect"]:
            gone = local_cluster_disconnect(state_dir=state_dir, name=options["name"])
            self.stdout.write("disconnected" if gone else "was not connected")
            return
        path = local_cluster_connect(
            state_dir=state_dir,
            portal_url=options["portal_url"],
            name=options["name"],
            interval_seconds=options["interval"],
        )
        self.stdout.write(f"the node simulator now pushes simulated GPU readings to {options['portal_url']} ({path})")
