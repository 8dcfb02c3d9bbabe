from __future__ import annotations

from django.apps import AppConfig


class TelemetryConfig(AppConfig):
    name = "telemetry"
    verbose_name = "GPU telemetry"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from telemetry import signals  # noqa: F401 - connects the receivers
