"""Print a new key pair for sealed values (portal/sealing.py), as the settings that take it.

The public half goes to the web (PORTAL_SEAL_PUBLIC_KEY; the chart's `seal.publicKey`), the private half
to the worker only (PORTAL_SEAL_PRIVATE_KEY, better as a mounted file; the chart's `seal.privateKey` or a
Secret named in `seal.existingSecret`). With --private-key-file the private half is written to that file
(readable by its owner only) instead of the terminal.
"""

from __future__ import annotations

import os
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from portal import sealing


class Command(BaseCommand):
    help = "Print a new key pair for sealing users' secrets and registry passwords to the engine."

    def add_arguments(self, parser):
        parser.add_argument("--private-key-file", type=Path, help="write the private half here (mode 0600)")

    def handle(self, *args, private_key_file: Path | None = None, **options):
        public, private = sealing.generate_keypair()
        self.stdout.write(f"PORTAL_SEAL_PUBLIC_KEY={public}")
        if private_key_file is None:
            self.stdout.write(f"PORTAL_SEAL_PRIVATE_KEY={private}")
            return
        try:
            descriptor = os.open(private_key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except OSError as exc:
            raise CommandError(f"{private_key_file}: {exc.strerror} (an existing key is never overwritten)") from exc
        with os.fdopen(descriptor, "w") as handle:
            handle.write(private + "\n")
        self.stdout.write(f"PORTAL_SEAL_PRIVATE_KEY_FILE={private_key_file}")
