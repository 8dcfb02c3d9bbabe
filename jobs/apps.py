from __future__ import annotations

from django.apps import AppConfig


class JobsConfig(AppConfig):
    name = "jobs"
    verbose_name = "GPU workloads"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.db.models.signals import post_delete, post_save

        from identity.models import Membership
        from identity.sshkeys import ssh_keys_changed
        from jobs.services import ssh_access

        # A person's SSH keys changed: the authorized_keys of the services they may open follow.
        ssh_keys_changed.connect(ssh_access.on_keys_changed, dispatch_uid="jobs.ssh_keys_changed")
        # Someone joined or left a team: its shared services' authorized_keys follow.
        post_save.connect(ssh_access.on_membership_changed, sender=Membership, dispatch_uid="jobs.ssh_member_joined")
        post_delete.connect(ssh_access.on_membership_changed, sender=Membership, dispatch_uid="jobs.ssh_member_left")
