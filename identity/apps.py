from __future__ import annotations

from django.apps import AppConfig


class IdentityConfig(AppConfig):
    name = "identity"
    verbose_name = "Identity provider"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from identity import signals  # noqa: F401 - connects the receivers
