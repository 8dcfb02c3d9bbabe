"""Named secrets: the portal keeps only their names and whether the engine has written them; the values
live in Kubernetes Secrets."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone


class SecretState(models.TextChoices):
    PENDING = "pending", "Being written"
    READY = "ready", "Ready"
    FAILED = "failed", "Not written"
    DELETING = "deleting", "Being deleted"


class TeamSecret(models.Model):
    """A secret a user (or, shared with the team, a manager) stored for their workloads.

    The web seals the value to the engine's key and hands it to the engine's worker, which writes it into
    a Kubernetes Secret (`k8s_name`, key `value`) in the team namespace; the portal never stores, shows or
    logs it. `version` counts stores (a replace is a new version); `state` says whether the engine has
    written the latest one. Workloads reference the secret by name; their pods get it through
    `secretKeyRef` (an environment variable) or as a file."""

    team = models.ForeignKey("jobs.Team", on_delete=models.CASCADE, related_name="secrets")
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="secrets")
    name = models.CharField(max_length=40)
    shared = models.BooleanField(default=False, help_text="Usable by every member of the team (managers only).")
    k8s_name = models.CharField(max_length=63)
    state = models.CharField(max_length=10, choices=SecretState.choices, default=SecretState.PENDING)
    version = models.PositiveIntegerField(default=1)
    message = models.CharField(max_length=500, blank=True, help_text="Why the engine could not write it.")
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["team__name", "name"]
        constraints = [models.UniqueConstraint(fields=["team", "k8s_name"], name="one_secret_per_k8s_name")]

    def __str__(self) -> str:
        return f"{self.team}: {self.name}"
