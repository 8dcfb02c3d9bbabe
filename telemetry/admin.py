from __future__ import annotations

from django.contrib import admin, messages
from django.utils import timezone

from portal.admin_widgets import SafeAutocompleteAdmin
from telemetry.models import AgentToken, GpuState, IdlePolicy, IdleWarning, TelemetryNode
from telemetry.services.tokens import TOKEN_PREFIX, token_digest


@admin.register(AgentToken)
class AgentTokenAdmin(admin.ModelAdmin):
    list_display = ["name", "node_name", "prefix", "created_at", "created_by", "last_used_at", "revoked_at"]
    list_filter = [("revoked_at", admin.EmptyFieldListFilter)]
    readonly_fields = ["prefix", "created_at", "created_by", "last_used_at"]
    actions = ["revoke"]

    def get_fields(self, request, obj=None):
        if obj is None:
            return ["name", "node_name"]
        return ["name", "node_name", "prefix", "created_at", "created_by", "last_used_at", "revoked_at"]

    def formfield_for_dbfield(self, db_field, request, **kwargs):
        field = super().formfield_for_dbfield(db_field, request, **kwargs)
        if db_field.name == "node_name" and field is not None:
            # A token without a node would speak for none (telemetry/services/tokens.py).
            field.required = True
            field.help_text = "The one node whose reports this token may send (its Kubernetes node name)."
        return field

    def get_readonly_fields(self, request, obj=None):
        # A token's node is fixed once issued: re-pointing it would let one token speak for another node.
        return [*self.readonly_fields, "node_name"] if obj is not None else self.readonly_fields

    def save_model(self, request, obj, form, change):
        if not change:
            import secrets

            token = TOKEN_PREFIX + secrets.token_urlsafe(32)
            obj.prefix, obj.token_hash, obj.created_by = token[:12], token_digest(token), request.user
            # One node, one live token: the node's earlier token stops working now.
            AgentToken.objects.filter(node_name=obj.node_name, revoked_at__isnull=True).update(
                revoked_at=timezone.now()
            )
            super().save_model(request, obj, form, change)
            messages.warning(
                request,
                f"Agent token for “{obj.name}”: {token} — copy it now, it is not stored and will not be shown "
                "again. Give it to the agents as AGENT_TOKEN (or a Secret mounted as AGENT_TOKEN_FILE).",
            )
            return
        super().save_model(request, obj, form, change)

    @admin.action(description="Revoke the selected tokens")
    def revoke(self, request, queryset):
        count = queryset.filter(revoked_at__isnull=True).update(revoked_at=timezone.now())
        self.message_user(request, f"{count} token(s) revoked; agents using them now get 401.")


class GpuStateInline(admin.TabularInline):
    model = GpuState
    extra = 0
    can_delete = False
    fields = ["index", "model", "state", "utilization_gpu_percent", "memory_used_bytes", "temperature_celsius",
              "power_draw_watts", "ecc_uncorrected_volatile", "xid_errors", "pod_uids", "sampled_at"]  # fmt: skip
    readonly_fields = fields

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(TelemetryNode)
class TelemetryNodeAdmin(admin.ModelAdmin):
    list_display = ["name", "simulated", "driver_version", "cuda_driver_version", "last_report_at", "reports_total"]
    list_filter = ["simulated"]
    search_fields = ["name"]
    readonly_fields = [f.name for f in TelemetryNode._meta.fields]
    inlines = [GpuStateInline]

    def has_add_permission(self, request):
        return False


@admin.register(IdlePolicy)
class IdlePolicyAdmin(SafeAutocompleteAdmin, admin.ModelAdmin):
    list_display = [
        "team", "enabled", "threshold_percent", "warn_after_hours", "stop_after_hours", "browser_activity_counts",
        "updated_at",
    ]  # fmt: skip
    list_filter = ["enabled"]
    autocomplete_fields = ["team"]


@admin.register(IdleWarning)
class IdleWarningAdmin(admin.ModelAdmin):
    list_display = ["workload", "idle_since", "warned_at", "stop_at"]
    readonly_fields = ["workload", "idle_since", "warned_at", "threshold_percent", "stop_at"]

    def has_add_permission(self, request):
        return False
