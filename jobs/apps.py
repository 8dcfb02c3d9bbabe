from __future__ import annotations

from django.apps import AppConfig


class JobsConfig(AppConfig):
    name = "jobs"
    verbose_name = "GPU workloads"
    default_auto_field = "django.db.models.BigAutoField"
