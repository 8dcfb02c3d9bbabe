"""Named secrets: the portal keeps only their names; the values live in Kubernetes Secrets."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone


class TeamSecret(models.Model):
    """A secret a user (or, shared with the team, a manager) stored for their workloads.

    The value is written once into a Kubernetes Secret (`k8s_name`, key `value`) in the team namespace
    and never stored, shown or logged by the portal. Workloads reference it by name; their pods get it
    through `secretKeyRef` (an environment variable) or as a file."""

    team = models.ForeignKey("jobs.Team", on_delete=models.CASCADE, related_name="secrets")
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="secrets")
    name = models.CharField(max_length=40)
    shared = models.BooleanField(default=False, help_text="Usable by every member of the team (managers only).")
    k8s_name = models.CharField(max_length=63)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["team__name", "name"]
        constraints = [models.UniqueConstraint(fields=["team", "k8s_name"], name="one_secret_per_k8s_name")]

    def __str__(self) -> str:
        return f"{self.team}: {self.name}"
