from __future__ import annotations

from django import forms
from django.contrib import admin

from jobs.models import AllowedRegistry, CatalogImage, GpuNode, GpuType
from jobs.services.object_creation import forget_namespaces
from jobs.services.quota_changes import gpu_type_changed


@admin.register(GpuType)
class GpuTypeAdmin(admin.ModelAdmin):
    list_display = [
        "slug",
        "display_name",
        "node_label_key",
        "node_label_value",
        "resource_name",
        "billing_weight",
        "enabled",
    ]
    list_editable = ["enabled"]
    search_fields = ["slug", "display_name"]

    def save_model(self, request, obj, form, change):
        super().save_model(request, obj, form, change)
        # The teams' namespace ResourceQuotas cap CPU and memory from these sizes: keep them in step.
        gpu_type_changed(gpu_type=obj, fields=set(form.changed_data), created=not change)


@admin.register(GpuNode)
class GpuNodeAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "gpu_type",
        "gpus_allocatable",
        "gpus_in_use",
        "ready",
        "cuda_driver_version",
        "last_seen_at",
    ]
    list_filter = ["gpu_type", "ready"]
    readonly_fields = [f.name for f in GpuNode._meta.fields]

    def has_add_permission(self, request):
        return False  # nodes come from the cluster's inventory sync


@admin.register(CatalogImage)
class CatalogImageAdmin(admin.ModelAdmin):
    list_display = ["title", "reference", "suits", "cuda_version", "needs_root", "root_allowed", "enabled"]
    list_filter = ["suits", "enabled", "needs_root", "root_allowed"]
    search_fields = ["title", "reference"]


class AllowedRegistryForm(forms.ModelForm):
    """The password is write-only: never rendered back; left empty on edit, the stored one stays."""

    pull_password = forms.CharField(required=False, widget=forms.PasswordInput(render_value=False))

    class Meta:
        model = AllowedRegistry
        fields = ["host", "note", "pull_username", "pull_password"]

    def clean(self):
        cleaned = super().clean()
        if not cleaned.get("pull_password") and self.instance.pk:
            cleaned["pull_password"] = self.instance.pull_password
        if bool(cleaned.get("pull_username")) != bool(cleaned.get("pull_password")):
            raise forms.ValidationError("Give both the pull username and password, or neither.")
        return cleaned


@admin.register(AllowedRegistry)
class AllowedRegistryAdmin(admin.ModelAdmin):
    form = AllowedRegistryForm
    list_display = ["host", "note", "has_credentials"]
    search_fields = ["host"]

    @admin.display(boolean=True, description="Pull credentials")
    def has_credentials(self, registry: AllowedRegistry) -> bool:
        return bool(registry.pull_secret_name)

    def save_model(self, request, obj, form, change):
        super().save_model(request, obj, form, change)
        # Every team namespace gets the new pull Secret the next time a workload is created there.
        forget_namespaces()
