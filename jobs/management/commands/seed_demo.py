from __future__ import annotations

import json
import os
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from identity.models import Membership, Role
from jobs.models import Team
from jobs.services.seeding import DEMO, SeedError, apply_seed


class Command(BaseCommand):
    help = (
        "Create the demo GPU types, team, catalog and users for `make run` (idempotent); --seed FILE adds "
        "a seed document of its own (JSON), e.g. the catalog of the images the local cluster built."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--seed", action="append", default=[], metavar="FILE", help="a JSON seed document to apply as well"
        )

    def handle(self, *args, **options):
        apply_seed(DEMO)
        # Documents the caller made (make run: the local images' catalog entries, localhost/...); the
        # product itself knows nothing of the local cluster.
        for path in options["seed"]:
            try:
                apply_seed(json.loads(Path(path).read_text()))
            except (OSError, ValueError, SeedError) as exc:
                raise CommandError(f"seed document {path}: {exc}") from exc
        team = Team.objects.get(slug="demo")
        users = get_user_model()
        password = os.environ.get("DEMO_PASSWORD", "gpuportal-demo")
        accounts = [("admin", Role.MANAGER, True), ("alice", Role.MANAGER, False), ("bob", Role.MEMBER, False)]
        for username, role, staff in accounts:
            user, created = users.objects.get_or_create(
                username=username,
                defaults={"is_staff": staff, "is_superuser": staff, "email": f"{username}@example.org"},
            )
            if created:
                user.set_password(password)
                user.save()
            Membership.objects.get_or_create(user=user, team=team, defaults={"role": role})
        try:
            from jobs.services.cluster.inventory import inventory_sync

            nodes = inventory_sync()
            self.stdout.write(f"Found {nodes} GPU node(s) in the cluster.")
        except Exception as exc:  # the portal still starts; the beat task retries the inventory
            self.stdout.write(f"Could not read the cluster's nodes yet ({exc.__class__.__name__}).")
        site = settings.SITE_URL.rstrip("/")
        self.stdout.write(
            f"Sign in at {site}/ as admin, alice (managers of Demo Lab) or bob (member), "
            f"password {password!r}. Django admin: {site}/admin/"
        )
