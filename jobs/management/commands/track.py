from __future__ import annotations

import signal

from django.core.management.base import BaseCommand

from jobs.services.cluster.watch_loop import Tracker


class Command(BaseCommand):
    help = "Keep workload states in step with the cluster (watch + periodic full resync). Runs until stopped."

    def add_arguments(self, parser):
        parser.add_argument("--max-seconds", type=float, default=None, help="Stop after this long (for tests).")

    def handle(self, *args, max_seconds: float | None = None, **options):
        tracker = Tracker()
        signal.signal(signal.SIGTERM, lambda *_: tracker.stop())
        signal.signal(signal.SIGINT, lambda *_: tracker.stop())
        self.stderr.write("tracker: watching pods and jobs")
        tracker.run(max_seconds=max_seconds)
        self.stderr.write("tracker: stopped")
