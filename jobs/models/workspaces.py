"""Workspaces: the persistent volumes (claims in a team namespace) that outlive every workload."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone


class Workspace(models.Model):
    """One claim the portal created: a user's home (owner set) or the team's shared space (no owner).

    The team is protected: a team with workspaces cannot be deleted until an admin deletes each one's
    data explicitly (admin action "Delete the data of the selected workspaces", recorded in the admin log
    and in `WorkspaceDeletion`)."""

    team = models.ForeignKey("jobs.Team", on_delete=models.PROTECT, related_name="workspaces")
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="workspaces"
    )
    namespace = models.CharField(max_length=63)
    claim_name = models.CharField(max_length=63)
    mount_path = models.CharField(max_length=255)
    size_gib = models.PositiveIntegerField()
    storage_class = models.CharField(max_length=253)
    created_at = models.DateTimeField(default=timezone.now)
    # The PersistentVolume bound to the claim (its spec.volumeName), learned by the engine once bound:
    # node agents report use per volume name (agent/volumes.py), and this maps it back.
    volume_name = models.CharField(max_length=253, blank=True, db_index=True)
    # The latest use a node agent measured on a node where a workload mounts it; null: not measured yet.
    used_bytes = models.BigIntegerField(null=True, blank=True)
    capacity_bytes = models.BigIntegerField(null=True, blank=True)  # the volume's filesystem, when its own
    used_measured_at = models.DateTimeField(null=True, blank=True)
    used_measured_on = models.CharField(max_length=253, blank=True)  # the node whose agent measured it

    class Meta:
        ordering = ["team__name", "claim_name"]
        constraints = [
            models.UniqueConstraint(fields=["namespace", "claim_name"], name="one_workspace_per_claim"),
        ]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.claim_name}"

    @property
    def kind(self) -> str:
        return "home" if self.owner_id else "team"

    @property
    def size_bytes(self) -> int:
        return self.size_gib * 1024**3

    @property
    def used_fraction(self) -> float | None:
        """Used bytes over the claim's size (may pass 1 on storage that does not enforce it)."""
        if self.used_bytes is None or not self.size_gib:
            return None
        return self.used_bytes / self.size_bytes


class WorkspaceDeletion(models.Model):
    """The record of an admin deleting a workspace's data (the claim and, by its class, the volume)."""

    team_name = models.CharField(max_length=100)
    namespace = models.CharField(max_length=63)
    claim_name = models.CharField(max_length=63)
    owner_username = models.CharField(max_length=150, blank=True)
    size_gib = models.PositiveIntegerField()
    deleted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    deleted_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-deleted_at", "-id"]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.claim_name} deleted {self.deleted_at:%Y-%m-%d %H:%M}"
