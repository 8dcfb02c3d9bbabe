"""Admin: what was told to whom, and why a delivery failed (never the webhook URL's secret parts)."""

from __future__ import annotations

from django.contrib import admin

from notifications.models import Delivery, Event, Preference, TeamWebhook


class DeliveryInline(admin.TabularInline):
    model = Delivery
    extra = 0
    can_delete = False
    fields = ("channel", "recipient", "status", "attempts", "sent_at", "last_error")
    readonly_fields = fields


@admin.register(Event)
class EventAdmin(admin.ModelAdmin):
    list_display = ("created_at", "kind", "summary", "team", "recipient")
    list_filter = ("kind",)
    search_fields = ("key", "summary")
    readonly_fields = (
        "key",
        "kind",
        "workload",
        "team",
        "recipient",
        "summary",
        "details",
        "created_at",
        "fanned_out_at",
    )
    inlines = [DeliveryInline]

    def has_add_permission(self, request) -> bool:
        return False


@admin.register(Delivery)
class DeliveryAdmin(admin.ModelAdmin):
    list_display = ("id", "event", "channel", "recipient", "status", "attempts", "next_attempt_at", "last_error")
    list_filter = ("status", "channel")
    readonly_fields = ("event", "channel", "recipient", "status", "attempts", "next_attempt_at", "claimed_until",
                       "sent_at", "last_error", "idempotency_key")  # fmt: skip

    def has_add_permission(self, request) -> bool:
        return False


@admin.register(TeamWebhook)
class TeamWebhookAdmin(admin.ModelAdmin):
    list_display = ("team", "format", "enabled", "updated_by", "updated_at")


@admin.register(Preference)
class PreferenceAdmin(admin.ModelAdmin):
    list_display = ("user", "email", "webhook_format", "updated_at")
    search_fields = ("user__username",)
