"""Admin: which claims put people in which teams, who keeps each team, and the record of changes."""

from __future__ import annotations

from django.contrib import admin

from identity.models import ClaimRule, MembershipChange, ProviderAccount, TeamSource


@admin.register(ClaimRule)
class ClaimRuleAdmin(admin.ModelAdmin):
    list_display = ("team", "claim", "value", "role")
    list_filter = ("role", "claim")
    search_fields = ("value", "team__name")


@admin.register(TeamSource)
class TeamSourceAdmin(admin.ModelAdmin):
    list_display = ("team", "managed_by")
    list_filter = ("managed_by",)


@admin.register(MembershipChange)
class MembershipChangeAdmin(admin.ModelAdmin):
    list_display = ("at", "username", "team_name", "old_role", "new_role", "source", "note")
    list_filter = ("source",)
    search_fields = ("username", "team_name")
    readonly_fields = ("user", "username", "team", "team_name", "old_role", "new_role", "source", "at", "note")

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False


@admin.register(ProviderAccount)
class ProviderAccountAdmin(admin.ModelAdmin):
    list_display = ("user", "subject", "issuer", "last_sign_in_at")
    search_fields = ("user__username", "subject")
    readonly_fields = ("user", "issuer", "subject", "created_at", "last_sign_in_at")

    def has_add_permission(self, request) -> bool:
        return False  # made at a person's first sign-in; every field is read-only, so an added row had no user
