from __future__ import annotations

import os

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from jobs.models import Membership, Role, Team
from jobs.services.seeding import DEMO, apply_seed


class Command(BaseCommand):
    help = (
        "Create the demo GPU types, team, catalog and users for `make run` (idempotent); with "
        "GPUPORTAL_LOCAL_IMAGES=1 also the catalog entries of the images localcluster/images.py builds."
    )

    def handle(self, *args, **options):
        apply_seed(DEMO)
        if os.environ.get("GPUPORTAL_LOCAL_IMAGES") == "1":
            # The local cluster's real nodes: their GPU types (with demo quotas) and the images built here.
            from localcluster.images import catalog_seed

            apply_seed(catalog_seed(quota_team="demo"))
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
            from jobs.services.inventory import inventory_sync

            nodes = inventory_sync()
            self.stdout.write(f"Found {nodes} GPU node(s) in the cluster.")
        except Exception as exc:  # the portal still starts; the beat task retries the inventory
            self.stdout.write(f"Could not read the cluster's nodes yet ({exc.__class__.__name__}).")
        site = settings.SITE_URL.rstrip("/")
        self.stdout.write(
            f"Sign in at {site}/ as admin, alice (managers of Demo Lab) or bob (member), "
            f"password {password!r}. Django admin: {site}/admin/"
        )
