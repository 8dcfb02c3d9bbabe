from __future__ import annotations

from django.contrib import admin, messages

from api.models import ApiToken
from api.tokens import token_revoke


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ["name", "user", "prefix", "created_at", "last_used_at", "expires_at", "revoked_at"]
    list_filter = [("revoked_at", admin.EmptyFieldListFilter)]
    search_fields = ["name", "user__username", "prefix"]
    list_select_related = ["user"]
    readonly_fields = ["user", "name", "prefix", "created_at", "last_used_at", "revoked_at", "revoked_by"]
    fields = ["user", "name", "prefix", "created_at", "last_used_at", "expires_at", "revoked_at", "revoked_by"]
    actions = ["revoke_tokens"]

    def has_add_permission(self, request):
        return False  # tokens are created by their owners, who are the only ones to see them

    @admin.action(description="Revoke the selected tokens", permissions=["change"])
    def revoke_tokens(self, request, queryset) -> None:
        revoked = sum(token_revoke(token=token, by=request.user) for token in queryset)
        messages.success(request, f"Revoked {revoked} token(s).")
