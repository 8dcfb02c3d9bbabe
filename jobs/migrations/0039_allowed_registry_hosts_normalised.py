"""Allowed registries saved before the admin form read hosts as image references name them.

The form now stores a host lowercase, host[:port], with no scheme and no path (jobs/admin/catalog.py,
AllowedRegistryForm.clean_host), since that is what it is compared with: the registry of each image
reference people type. Rows saved before that ("HTTPS://Registry.Lab:5000/", "GHCR.IO/") matched no
reference at all, so every image from them was refused. Here they are stored as the form would store them:

- lowercase, without a scheme (http://, https://) and without trailing slashes;
- rows that then name the same host are merged into one: the row with pull credentials is kept (the first
  such, by id), else the one already spelled so, else the first; their notes are joined;
- a value that still is not a host (a path, "quay.io/team"; a word without a dot, which a reference would
  read as part of a Docker Hub path) is left as it was, for an admin to correct: widening an allow list
  from a path to its whole registry is not a migration's call.

Site facts caches see the change through the triggers of migration 0034. Not reversed: the spellings that
matched nothing are not worth restoring.
"""

import re

from django.db import migrations

_SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*://")
_LABEL = r"[a-z0-9](?:[a-z0-9-]*[a-z0-9])?"
_HOST = re.compile(rf"(?:localhost|\[[0-9a-f:.]+\]|{_LABEL}(?:\.{_LABEL})*)(?::[0-9]+)?")


def normal_host(stored: str) -> str:
    """The host as image references name it, or `stored` unchanged when it names none."""
    host = _SCHEME.sub("", stored.strip().lower()).rstrip("/")
    looks_like_host = "." in host or ":" in host or host == "localhost"  # as docker reads a reference
    return host if _HOST.fullmatch(host) and looks_like_host else stored


def normalise_hosts(apps, schema_editor):
    Registry = apps.get_model("jobs", "AllowedRegistry")
    groups: dict[str, list] = {}
    for row in Registry.objects.order_by("id"):
        groups.setdefault(normal_host(row.host), []).append(row)
    for host, rows in groups.items():
        if len(rows) == 1 and rows[0].host == host:
            continue
        keep = (
            next((r for r in rows if r.pull_username and r.pull_password_sealed), None)
            or next((r for r in rows if r.host == host), None)
            or rows[0]
        )
        notes = list(dict.fromkeys(r.note for r in rows if r.note))
        Registry.objects.filter(id__in=[r.id for r in rows if r.id != keep.id]).delete()  # before: host is unique
        keep.host = host
        keep.note = "; ".join(notes)[:200]
        keep.save(update_fields=["host", "note"])


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0038_catalog_home_template"),
    ]

    operations = [
        migrations.RunPython(normalise_hosts, migrations.RunPython.noop),
    ]
