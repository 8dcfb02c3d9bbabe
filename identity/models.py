"""Who is in which team (memberships and their roles), accounts at the identity provider, the
claim-to-team rules, and the record of membership changes."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone


class Role(models.TextChoices):
    MEMBER = "member", "Member"
    MANAGER = "manager", "Manager"


class Membership(models.Model):
    """A person in a team, as a member or a manager. Its table keeps the name it had when it lived in jobs."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    team = models.ForeignKey("jobs.Team", on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.MEMBER)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "jobs_membership"
        constraints = [models.UniqueConstraint(fields=["user", "team"], name="one_membership_per_team")]
        ordering = ["team__name", "user__username"]

    def __str__(self) -> str:
        return f"{self.user} in {self.team} ({self.role})"


class ProviderAccount(models.Model):
    """The provider's stable id of a person (issuer + subject), linked to a portal user."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="provider_account")
    issuer = models.CharField(max_length=300)
    subject = models.CharField(max_length=255)
    created_at = models.DateTimeField(default=timezone.now)
    last_sign_in_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["issuer", "subject"], name="one_user_per_provider_subject")]

    def __str__(self) -> str:
        return f"{self.subject} at {self.issuer}"


class TeamSource(models.Model):
    """Who keeps a team's membership: the identity provider (rebuilt from claims at every sign-in; the
    portal's forms never change it) or the portal (rules may only add people)."""

    class ManagedBy(models.TextChoices):
        PROVIDER = "provider", "Managed by the identity provider"
        PORTAL = "portal", "Managed in the portal"

    team = models.OneToOneField("jobs.Team", on_delete=models.CASCADE, related_name="source")
    managed_by = models.CharField(max_length=10, choices=ManagedBy.choices, default=ManagedBy.PROVIDER)

    def __str__(self) -> str:
        return f"{self.team}: {self.get_managed_by_display().lower()}"


class ClaimRule(models.Model):
    """People whose claim `claim` holds `value` (or contains it, for a list such as groups) are in `team`
    with `role`. Several rules may name one team; the strongest role wins."""

    team = models.ForeignKey("jobs.Team", on_delete=models.CASCADE, related_name="claim_rules")
    claim = models.CharField(max_length=100, default="groups", help_text="Name of the claim, e.g. groups.")
    value = models.CharField(max_length=300, help_text="e.g. /vision-lab or vision-lab-admins.")
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.MEMBER)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["team", "claim", "value"], name="one_rule_per_team_claim_value")]
        ordering = ["team__name", "claim", "value"]

    def __str__(self) -> str:
        return f"{self.claim} ∋ {self.value} → {self.team} ({self.role})"


class MembershipChange(models.Model):
    """One change to who is in a team, and why. Never edited.

    The record outlives the team and the person: deleting either leaves its rows with the name copied
    here at the time (the link is cleared), so a deleted team never takes its history with it, and the
    history never stops a team or a person from being deleted.
    """

    class Source(models.TextChoices):
        PROVIDER = "provider", "Identity provider sign-in"
        PORTAL = "portal", "Portal"

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    team = models.ForeignKey("jobs.Team", on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    username = models.CharField(max_length=150, blank=True, help_text="The person's username at the time.")
    team_name = models.CharField(max_length=100, blank=True, help_text="The team's name at the time.")
    old_role = models.CharField(max_length=10, blank=True, help_text="Empty: was not a member.")
    new_role = models.CharField(max_length=10, blank=True, help_text="Empty: no longer a member.")
    source = models.CharField(max_length=10, choices=Source.choices)
    changed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+",
        help_text="Who made the change in the portal (a manager on the members page, an admin).",
    )  # fmt: skip
    changed_by_name = models.CharField(max_length=150, blank=True, help_text="Their username at the time.")
    at = models.DateTimeField(default=timezone.now)
    note = models.CharField(max_length=300, blank=True)

    class Meta:
        ordering = ["-at", "-id"]

    def __str__(self) -> str:
        return f"{self.username} in {self.team_name}: {self.old_role or '-'} → {self.new_role or '-'}"

    def save(self, *args, **kwargs) -> None:
        # Names are copied once, when the record is written, so it still reads after a deletion.
        if not self.username and self.user_id is not None:
            self.username = self.user.get_username()
        if not self.team_name and self.team_id is not None:
            self.team_name = self.team.name
        if not self.changed_by_name and self.changed_by_id is not None:
            self.changed_by_name = self.changed_by.get_username()
        super().save(*args, **kwargs)


class SshKey(models.Model):
    """One of a person's SSH public keys: it reaches the authorized_keys of the services they may open
    (jobs.services.ssh_access). Validated by identity.sshkeys before it is stored."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="ssh_keys")
    name = models.CharField(max_length=100, help_text="What the key is for, e.g. the laptop it lives on.")
    public_key = models.TextField(help_text="The one line of the .pub file: type, key, and no options.")
    key_type = models.CharField(max_length=40)
    bits = models.PositiveIntegerField(default=0)
    fingerprint = models.CharField(max_length=60, help_text="SHA256:… as ssh-keygen -l prints it.")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [
            models.UniqueConstraint(fields=["user", "fingerprint"], name="ssh_key_once_per_person"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.key_type}, {self.fingerprint})"
