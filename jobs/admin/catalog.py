from __future__ import annotations

from django import forms
from django.contrib import admin, messages

import spec_rules
from jobs.models import AllowedRegistry, CatalogImage, GpuNode, GpuType, State, Workload
from jobs.services.cluster import node_health
from jobs.services.provisioning import forget_namespaces
from jobs.services.queue.reservation_plan import RESERVE_DEPTH
from jobs.services.queue.settings_changes import gpu_type_changed
from jobs.services.validation.images import parse_image_reference
from portal import sealing

# What reserve_after_seconds does, with the wait beyond the head (reserve_deeper_after_seconds) and the
# plan's depth (issue 38): shown in admin from the plan's own constant, so that the page says what it does.
RESERVE_AFTER_HELP = (
    "How long the head of a team's queue (its first workload of this type that does not fit the team's "
    "quota) waits before GPUs are reserved for it as they free up (smaller work then passes it only where "
    f"it ends before they are due). The next {RESERVE_DEPTH - 1} behind the head are reserved for once they "
    "have waited as long as 'reserve deeper after seconds' says, or this when longer. 0: reserve for the head "
    "at once. Empty: no reservations, smaller work always passes larger work that does not fit."
)


@admin.register(GpuType)
class GpuTypeAdmin(admin.ModelAdmin):
    list_display = [
        "slug",
        "display_name",
        "node_label_key",
        "node_label_value",
        "resource_name",
        "kind",
        "share_in_words",
        "billing_weight",
        "reserve_after_seconds",
        "reserve_deeper_after_seconds",
        "queue_aging",
        "enabled",
    ]
    list_editable = ["enabled"]
    list_filter = ["kind", "enabled"]

    @admin.display(description="One device is")
    def share_in_words(self, obj: GpuType) -> str:
        return obj.described

    search_fields = ["slug", "display_name"]

    def formfield_for_dbfield(self, db_field, request, **kwargs):
        field = super().formfield_for_dbfield(db_field, request, **kwargs)
        if db_field.name == "reserve_after_seconds" and field is not None:
            field.help_text = RESERVE_AFTER_HELP
        return field

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
    search_fields = ["name"]
    readonly_fields = [f.name for f in GpuNode._meta.fields]
    actions = ["take_out", "put_back"]

    def has_add_permission(self, request):
        return False  # nodes come from the cluster's inventory sync

    def get_list_display(self, request):
        return [*super().get_list_display(request), "kept_out"]

    @admin.display(boolean=True, description="Kept out (new work avoids it)")
    def kept_out(self, node: GpuNode) -> bool:
        return node.name in self._avoided

    def changelist_view(self, request, extra_context=None):
        self._avoided = set(node_health.nodes_to_avoid())
        return super().changelist_view(request, extra_context)

    @admin.action(description="Take the selected nodes out (a GPU is failing: new work avoids them)")
    def take_out(self, request, queryset) -> None:
        names = sorted(queryset.values_list("name", flat=True))
        taken = [name for name in names if node_health.take_out(name, by=request.user)]
        running = Workload.objects.filter(node_name__in=names, state__in=State.holding()).count()
        self.message_user(
            request,
            f"Took {len(taken)} node(s) out: new work avoids {', '.join(names)} until you put them back. "
            f"{running} workload(s) running there keep running (cancel them from the workload list if they "
            "must end).",
            messages.WARNING,
        )

    @admin.action(description="Put the selected nodes back (clears their GPU health marks: new work may use them)")
    def put_back(self, request, queryset) -> None:
        names = sorted(queryset.values_list("name", flat=True))
        for mark in node_health.open_marks().filter(node_name__in=names):
            node_health.clear_mark(mark, by=request.user)
        self.message_user(request, f"Put {len(names)} node(s) back: new work may use {', '.join(names)}.")


LIST_OF_STRINGS = 'A list of strings, each one argument, e.g. ["python", "train.py"] (or leave it empty).'
ENV_OBJECT = (
    'An object of variable names and their values, e.g. {"DIGITS_URL_PREFIX": "{base_path}"} (or leave it empty).'
)


class CatalogImageForm(forms.ModelForm):
    """The JSON boxes hold what a launch copies (command, arguments) and what the engine adds to a service
    (base-URL arguments and variables): each is checked for the shape those use, so that an entry a launch
    or the engine cannot use is a form error here, not a failure of every workload started from it. An
    emptied box is the empty list or object (the column allows no NULL). Its model and fields are the
    ModelAdmin's."""

    def _strings(self, name: str) -> list[str]:
        value = self.cleaned_data.get(name)
        if value is None:
            return []
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise forms.ValidationError(LIST_OF_STRINGS)
        return value

    def clean_default_command(self) -> list[str]:
        return self._strings("default_command")

    def clean_default_args(self) -> list[str]:
        return self._strings("default_args")

    def clean_base_url_args(self) -> list[str]:
        return self._strings("base_url_args")

    def clean_base_url_env(self) -> dict[str, str]:
        value = self.cleaned_data.get("base_url_env")
        if value is None:
            return {}
        if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
            raise forms.ValidationError(ENV_OBJECT)
        problems = [problem for name in value if (problem := spec_rules.env_name_problem(name))]
        if problems:
            raise forms.ValidationError(problems[0])
        return value


@admin.register(CatalogImage)
class CatalogImageAdmin(admin.ModelAdmin):
    form = CatalogImageForm
    list_display = ["title", "reference", "suits", "cuda_version", "needs_root", "root_allowed", "enabled"]
    list_filter = ["suits", "enabled", "needs_root", "root_allowed"]
    search_fields = ["title", "reference"]


class AllowedRegistryForm(forms.ModelForm):
    """The password is write-only: sealed to the engine's key on save (portal/sealing.py), so neither the
    database nor this page ever holds it in the clear; left empty on edit, the stored one stays; clearing
    the username removes the credentials."""

    pull_password = forms.CharField(
        required=False,
        strip=False,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
        help_text="Sealed for the portal's engine, which alone can read it; never shown again. "
        "Leave empty to keep the stored one.",
    )

    class Meta:
        model = AllowedRegistry
        fields = ["host", "note", "pull_username"]

    def clean_host(self) -> str:
        # Compared with the registry of each reference people type, which reads it lowercase, as docker does:
        # a host stored otherwise (a scheme, a path, capitals) would match no image at all.
        host = self.cleaned_data["host"].strip().lower()
        parsed = parse_image_reference(f"{host}/image")
        if parsed is None or parsed.registry != host:
            raise forms.ValidationError(
                "A registry as image references name it: its host, with the port if any (nvcr.io, "
                "registry.lab:5000), no https:// and no path."
            )
        return host

    def clean(self):
        cleaned = super().clean()
        username, password = cleaned.get("pull_username"), cleaned.get("pull_password")
        stored = bool(self.instance.pk and self.instance.pull_password_sealed)
        if password and not username:
            self.add_error("pull_username", "Give the pull username with the password (or neither).")
        elif username and not password and not stored:
            self.add_error("pull_password", "Give the pull password with the username (or neither).")
        elif password:
            try:
                self.instance.pull_password_sealed = sealing.seal(password)
            except sealing.SealError as exc:
                self.add_error("pull_password", f"It cannot be stored: the portal has no key to seal it ({exc}).")
        elif not username:
            self.instance.pull_password_sealed = ""
        return cleaned


@admin.register(AllowedRegistry)
class AllowedRegistryAdmin(admin.ModelAdmin):
    form = AllowedRegistryForm
    list_display = ["host", "note", "has_credentials"]
    search_fields = ["host"]

    @admin.display(boolean=True, description="Pull credentials")
    def has_credentials(self, registry: AllowedRegistry) -> bool:
        return registry.has_credentials

    def save_model(self, request, obj, form, change):
        super().save_model(request, obj, form, change)
        # Every team namespace gets the new pull Secret the next time a workload is created there.
        forget_namespaces()
