"""Datasets: read-only data an admin makes available to chosen teams, mounted at /datasets/<name>."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import models

from jobs.models.teams import DNS_LABEL


class Dataset(models.Model):
    """An existing claim (in each allowed team's namespace) or an NFS export, mounted read-only."""

    name = models.CharField(
        max_length=40, unique=True, validators=[DNS_LABEL], help_text="Mounted at /datasets/<name>."
    )
    description = models.CharField(max_length=200, blank=True)
    claim_name = models.CharField(
        max_length=63, blank=True, validators=[DNS_LABEL],
        help_text="An existing PersistentVolumeClaim of this name in each allowed team's namespace.",
    )  # fmt: skip
    nfs_server = models.CharField(max_length=253, blank=True, help_text="Or an NFS server (host or IP) …")
    nfs_path = models.CharField(
        max_length=1024, blank=True, help_text="… and the exported path, e.g. /export/imagenet."
    )
    teams = models.ManyToManyField("jobs.Team", blank=True, related_name="datasets", help_text="Teams that may use it.")
    enabled = models.BooleanField(default=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        nfs = bool(self.nfs_server or self.nfs_path)
        if bool(self.claim_name) == nfs:
            raise ValidationError("Give either an existing claim, or an NFS server and path (not both).")
        if nfs and not (self.nfs_server and self.nfs_path.startswith("/")):
            raise ValidationError({"nfs_path": "An NFS dataset needs the server and an absolute exported path."})
