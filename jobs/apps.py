from __future__ import annotations

from django.apps import AppConfig


class JobsConfig(AppConfig):
    name = "jobs"
    verbose_name = "GPU workloads"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from identity.sshkeys import ssh_keys_changed
        from jobs.services import ssh_access

        # A person's SSH keys changed: the authorized_keys of the services they may open follow.
        ssh_keys_changed.connect(ssh_access.on_keys_changed, dispatch_uid="jobs.ssh_keys_changed")
