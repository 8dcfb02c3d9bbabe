from __future__ import annotations

from pathlib import Path

import yaml
from django.core.management.base import BaseCommand, CommandError

from jobs.services.seeding import SeedError, apply_seed


class Command(BaseCommand):
    help = "Load GPU types, teams, default quotas, catalog images and allowed registries from a YAML file."

    def add_arguments(self, parser):
        parser.add_argument("--file", required=True, type=Path)

    def handle(self, *args, file: Path, **options):
        try:
            document = yaml.safe_load(file.read_text()) or {}
            counts = apply_seed(document)
        except OSError as exc:
            raise CommandError(f"cannot read {file}: {exc.strerror}") from exc
        except (yaml.YAMLError, SeedError) as exc:
            raise CommandError(f"{file}: {exc}") from exc
        self.stdout.write("created: " + ", ".join(f"{n} {k.replace('_', ' ')}" for k, n in counts.items()))
