"""Forms of the web pages. They turn what a browser posts into the shapes the services take; the rules
about what may be submitted live in jobs.services.validation, whose errors are shown next to each field."""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from datetime import date
from typing import Any

from django import forms
from django.conf import settings
from django.utils import timezone

from identity.models import Role
from jobs.models import CatalogImage, GpuType, Kind, State, Workload
from jobs.models.teams import MAX_HALF_LIFE_HOURS, MAX_PER_MEMBER
from jobs.services.spec_fields import MAX_COMMAND_TOTAL, field_limits
from jobs.services.storage.secrets import MAX_SECRET_NAME
from jobs.services.usage import reports
from jobs.services.validation import default_name
from spec_rules import SWEEP_AT_MOST, env_name_problem, sweep_name_problem

CUSTOM_IMAGE = ""
TIME_UNITS = {"minutes": 60, "hours": 3600, "days": 86400}

# Where each field of jobs.services.submission.intake's spec is shown on the launch form.
SPEC_FIELD_TO_FORM = {"time_limit_seconds": "time_limit", "team": None}


def join_args(words: list[str] | None) -> str:
    """Arguments as one line the form splits back to the same list (shlex), quoted the way people write."""
    parts = []
    for word in words or []:
        quoted = shlex.quote(word)
        if quoted != word and '"' not in word and "\\" not in word:
            quoted = f'"{word}"'  # shlex reads backslash-free text in double quotes literally
        parts.append(quoted)
    return " ".join(parts)


# The launch page's fields that a kind cannot have (hidden there when that kind is chosen, static/js/launch.js).
HIDDEN_FOR_KIND: dict[str, tuple[str, ...]] = {
    Kind.SERVICE: ("nodes", "topology", "copies"),
    Kind.BATCH: ("port", "shared_with_team"),
}


class LaunchForm(forms.Form):
    name = forms.CharField(
        required=False,
        **field_limits("name"),
        help_text="Optional. Lowercase letters, digits and '-'. Empty: named after the image.",
    )
    kind = forms.ChoiceField(**field_limits("kind"), initial=Kind.BATCH, widget=forms.RadioSelect)
    catalog_image = forms.ChoiceField(required=False, label="Image")
    image = forms.CharField(
        required=False,
        **field_limits("image"),
        label="Custom image",
        help_text="A reference such as nvcr.io/nvidia/pytorch:24.01-py3, from an allowed registry.",
    )
    gpu_type = forms.ChoiceField(label="GPU type")
    gpu_count = forms.IntegerField(label="GPUs", **field_limits("gpu_count"), initial=1)
    nodes = forms.IntegerField(
        required=False,
        label="Nodes",
        **field_limits("nodes"),
        initial=1,
        help_text="Batch jobs: run on this many nodes at once, one rank each with the GPUs above (a gang job for "
        "torchrun: MASTER_ADDR, MASTER_PORT, WORLD_SIZE, NODE_RANK and NPROC_PER_NODE are set). All ranks start "
        "together or none holds GPUs.",
    )
    topology = forms.ChoiceField(
        required=False,
        label="Keep the nodes together",
        **field_limits("topology"),
        help_text="Several nodes: whether they must (or should) share one zone or rack.",
    )
    # Typed as one shell-like line, split into the list (whose limits the service checks).
    command = forms.CharField(
        required=False,
        max_length=MAX_COMMAND_TOTAL,
        help_text="Optional: replaces the image's entrypoint. Quote arguments with spaces as in a shell.",
    )
    args = forms.CharField(
        required=False,
        max_length=MAX_COMMAND_TOTAL,
        label="Arguments",
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="Split like a shell command line; no shell runs them.",
    )
    port = forms.IntegerField(required=False, **field_limits("port"), help_text="The port the service listens on.")
    time_limit = forms.IntegerField(required=False, min_value=1, label="Time limit")
    cpu_millicores = forms.IntegerField(
        required=False,
        **field_limits("cpu_millicores"),
        label="CPU (millicores)",
        help_text="Empty: the GPU type's default.",
    )
    memory_mib = forms.IntegerField(
        required=False, **field_limits("memory_mib"), label="Memory (MiB)", help_text="Empty: the GPU type's default."
    )
    time_limit_unit = forms.ChoiceField(
        choices=[(unit, unit) for unit in TIME_UNITS], initial="hours", label="Time limit unit"
    )
    priority = forms.IntegerField(required=False, **field_limits("priority"), help_text="Managers only.")
    datasets = forms.MultipleChoiceField(
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="Mounted read-only at /datasets/<name>.",
    )
    secrets = forms.MultipleChoiceField(
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="Each a read-only file /var/run/secrets/gpuportal/<name>; give a variable name to get it as "
        "that environment variable too.",
    )
    restartable = forms.BooleanField(
        required=False,
        label="Restartable",
        help_text="Batch jobs on borrowed GPUs: if the lender reclaims them, requeue at the front instead of failing.",
    )
    retry_limit = forms.IntegerField(
        required=False,
        label="Automatic retries",
        **field_limits("retry_limit"),
        help_text="Restartable batch jobs that end through no fault of their own (evicted, node lost, GPU fault, "
        "image pull timed out) run again, resuming from $GPUPORTAL_CHECKPOINT_DIR. Empty: your team's default.",
    )
    retryable_exit_codes = forms.CharField(
        required=False,
        label="Exit codes to retry",
        max_length=100,
        help_text="Exit codes of your own that mean 'run me again', e.g. 75. Any other exit code is final.",
    )
    checkpoint_workspace = forms.ChoiceField(
        required=False,
        label="Checkpoints in",
        **field_limits("checkpoint_workspace"),
        initial="home",
        help_text="Where $GPUPORTAL_CHECKPOINT_DIR lies: a workspace that outlives each attempt.",
    )
    copies = forms.IntegerField(
        required=False,
        min_value=1,
        max_value=SWEEP_AT_MOST,
        initial=1,
        label="Copies",
        help_text="Batch jobs: run this many copies at once (a sweep), named NAME-0, NAME-1, … and told apart by "
        "$GPUPORTAL_ARRAY_INDEX (0, 1, …) and $GPUPORTAL_ARRAY_SIZE. All are submitted, or none.",
    )
    shared_with_team = forms.BooleanField(
        required=False,
        label="Shared with my team",
        help_text="Teammates may open this service too, signed in as themselves. You can change it later.",
    )

    def __init__(
        self,
        *args: Any,
        catalog: list[CatalogImage],
        gpu_types: list[GpuType],
        may_set_priority: bool = False,
        datasets: list[str] | tuple[str, ...] = (),
        secrets: list[str] | tuple[str, ...] = (),
        default_time_limit: Mapping[str, int] | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("label_suffix", "")
        super().__init__(*args, **kwargs)
        self.catalog = catalog
        if not settings.GANG_TOPOLOGY_LABEL:
            del self.fields["topology"]  # no label names a zone or rack here: nothing to keep together
        if default_time_limit:
            # The one default (settings, used by the API and the CLI too) applies when this is left empty.
            self.fields["time_limit"].help_text = (
                f"Leave empty for the default: {_in_words(default_time_limit['batch'])} for a batch job, "
                f"{_in_words(default_time_limit['service'])} for a service."
            )
        self.fields["catalog_image"].choices = [(str(c.id), c.title) for c in catalog] + [
            (CUSTOM_IMAGE, "Custom image…")
        ]
        self.fields["gpu_type"].choices = [(t.slug, t.display_name) for t in gpu_types]
        if not may_set_priority:
            del self.fields["priority"]
        self._offer("datasets", datasets)
        self._offer("secrets", secrets)
        self.secret_env = self._secret_variables(secrets)
        self.secret_env_errors: dict[str, str] = {}
        self.env_rows = self._env_rows()
        self.env_errors: list[str] = []

    def _offer(self, field: str, names: list[str] | tuple[str, ...]) -> None:
        """A multiple choice of `names`; left off the form when there is nothing to choose."""
        if names:
            self.fields[field].choices = [(name, name) for name in names]
        else:
            del self.fields[field]

    def _secret_variables(self, secrets: list[str] | tuple[str, ...]) -> dict[str, str]:
        """Each secret's optional variable name: secret_env_<name> (secret names are [a-z0-9-])."""
        if self.is_bound:
            return {name: (self.data.get(f"secret_env_{name}") or "").strip() for name in secrets}
        return {name: (self.initial.get("secret_env") or {}).get(name, "") for name in secrets}

    def _env_rows(self) -> list[dict[str, str]]:
        """Environment variables come as parallel env_name/env_value lists, one pair per row on the page."""
        if not self.is_bound:
            return list(self.initial.get("env") or [])
        if not hasattr(self.data, "getlist"):
            return []
        names, values = self.data.getlist("env_name"), self.data.getlist("env_value")
        values = values + [""] * (len(names) - len(values))
        return [{"name": n.strip(), "value": v} for n, v in zip(names, values, strict=False)]

    def clean_command(self) -> list[str]:
        return self._split("command")

    def clean_args(self) -> list[str]:
        return self._split("args")

    def _split(self, field: str) -> list[str]:
        try:
            return shlex.split(self.cleaned_data.get(field) or "")
        except ValueError as exc:  # unbalanced quotes
            raise forms.ValidationError(f"Could not split this into arguments: {exc}.") from exc

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        self._leave_out_what_the_kind_cannot_have(cleaned)
        rows = [r for r in self.env_rows if r["name"] or r["value"]]
        if any(not r["name"] for r in rows):
            self.env_errors.append("Every value needs a variable name.")
        self.env_rows = rows
        self._clean_secret_env(set(cleaned.get("secrets") or ()))
        copies = cleaned.get("copies") or 1
        if cleaned.get("name") and (problem := sweep_name_problem(cleaned["name"], copies)):
            self.add_error("name", problem)
        return cleaned

    def _leave_out_what_the_kind_cannot_have(self, cleaned: dict[str, Any]) -> None:
        """The fields the page hides for the kind chosen (a batch draft's Nodes, Copies and topology once the
        person switches to Service, a service's port once back to a batch job) keep what was typed there: it
        is not this kind's, so it is neither sent nor judged, never an error on a field the person cannot see."""
        for name in HIDDEN_FOR_KIND.get(cleaned.get("kind") or "", ()):
            if name in self.fields:
                self._errors.pop(name, None)
                cleaned[name] = self.fields[name].to_python(None)

    def _clean_secret_env(self, chosen: set[str]) -> None:
        """Each secret's variable name: well formed, not the portal's, not given twice, and only for a
        secret that is attached. The submission checks the rest (a clash with a plain variable)."""
        seen: dict[str, str] = {}
        for name, variable in self.secret_env.items():
            if not variable:
                continue
            if name not in chosen:
                error = f"Tick {name} to attach it as ${variable}, or clear its variable name."
            elif problem := env_name_problem(variable):
                error = problem
            elif variable in seen:
                error = f"{variable} is already the variable of {seen[variable]}."
            else:
                seen[variable] = name
                continue
            self.secret_env_errors[name] = error
            self.add_error("secrets", error)

    def secret_rows(self) -> list[dict[str, Any]]:
        """The secrets offered, each with whether it is ticked, its variable name and its error."""
        if "secrets" not in self.fields:
            return []
        ticked = set(self["secrets"].value() or ())
        return [
            {"name": name, "checked": name in ticked, "env": self.secret_env.get(name, ""),
             "error": self.secret_env_errors.get(name, "")}
            for name, _ in self.fields["secrets"].choices
        ]  # fmt: skip

    def is_valid(self) -> bool:
        # The environment rows are not a Django field; their errors are kept (and shown) apart.
        return super().is_valid() and not self.env_errors

    def spec(self) -> dict[str, Any]:
        """The submission, in the shape workload_submit takes."""
        batch = self.cleaned_data["kind"] == Kind.BATCH
        return {**self._asked_for(), **self._optional(), **(self._batch_only() if batch else self._service_only())}

    def _asked_for(self) -> dict[str, Any]:
        """The fields every submission has (empty ones as the service reads "left empty")."""
        data = self.cleaned_data
        limit = data.get("time_limit")
        return {
            "name": data.get("name") or "",
            "kind": data["kind"],
            "catalog_image": data.get("catalog_image") or None,
            "image": "" if data.get("catalog_image") else (data.get("image") or "").strip(),
            "gpu_type": data["gpu_type"],
            "gpu_count": data["gpu_count"],
            "nodes": data.get("nodes") or 1,
            # Hidden for a service (as Nodes is): a choice left there from a batch job is not the service's.
            "topology": (data.get("topology") or "") if data["kind"] == "batch" else "",
            "command": data.get("command") or [],
            "args": data.get("args") or [],
            "env": [dict(row) for row in self.env_rows],
            "time_limit_seconds": limit * TIME_UNITS[data["time_limit_unit"]] if limit else None,
        }

    def _optional(self) -> dict[str, Any]:
        """Fields sent only when filled in (the service's defaults apply otherwise)."""
        data = self.cleaned_data
        spec = {size: data[size] for size in ("cpu_millicores", "memory_mib") if data.get(size)}
        if "priority" in self.fields and data.get("priority") is not None:
            spec["priority"] = data["priority"]
        if data.get("datasets"):
            spec["datasets"] = list(data["datasets"])
        if data.get("secrets"):
            spec["secrets"] = [{"name": name, "env": self.secret_env.get(name, "")} for name in data["secrets"]]
        return spec

    def _batch_only(self) -> dict[str, Any]:
        """A batch job's restart and retry settings; a batch job has no port."""
        data = self.cleaned_data
        spec: dict[str, Any] = {"port": None}
        if data.get("restartable"):
            spec["restartable"] = True
        if data.get("retry_limit") is not None:
            spec["retry_limit"] = data["retry_limit"]
        codes = [c for c in re.split(r"[\s,]+", data.get("retryable_exit_codes") or "") if c]
        if codes:
            spec["retryable_exit_codes"] = [int(c) if c.isdigit() else c for c in codes]
        if data.get("checkpoint_workspace"):
            spec["checkpoint_workspace"] = data["checkpoint_workspace"]
        return spec

    def _service_only(self) -> dict[str, Any]:
        data = self.cleaned_data
        return {"port": data.get("port"), "shared_with_team": bool(data.get("shared_with_team"))}

    def copy_count(self) -> int:
        return self.cleaned_data.get("copies") or 1

    def copies_base_name(self) -> str:
        """What the copies are named after: the name given, else the image's (as a single one is named)."""
        data = self.cleaned_data
        if data.get("name"):
            return data["name"]
        chosen = next((c for c in self.catalog if str(c.id) == data.get("catalog_image")), None)
        return default_name(chosen.reference if chosen else (data.get("image") or "").strip())

    def add_copies_errors(self, errors: dict[str, list[str]]) -> None:
        """The errors of a sweep (`workloads[i].field`, as the REST batch names them) shown once per field:
        the copies differ only in name and index, so what is wrong with one is wrong with all. The count's
        own limits (the queue caps, at most so many in one go) go to the copies field."""
        by_field: dict[str, list[str]] = {}
        for key, messages in errors.items():
            field = key.split(".", 1)[1] if key.startswith("workloads[") and "." in key else key
            if field in ("workloads", "queue"):
                field = "copies"
            seen = by_field.setdefault(field, [])
            seen.extend(m for m in messages if m not in seen)
        for field, messages in by_field.items():
            if field == "copies":
                for message in messages:
                    self.add_error("copies", message)
            else:
                self.add_submission_errors({field: messages})

    def add_submission_errors(self, errors: dict[str, list[str]]) -> None:
        """Show the service's errors next to the fields they are about."""
        for spec_field, messages in errors.items():
            if spec_field == "env":
                self.env_errors.extend(messages)
                continue
            field = SPEC_FIELD_TO_FORM.get(spec_field, spec_field)
            if field == "image" and self.cleaned_data.get("catalog_image"):
                field = "catalog_image"  # e.g. a CUDA mismatch: about the catalog image chosen
            for message in messages:
                if field in self.fields:
                    self.add_error(field, message)
                else:
                    self.add_error(None, message if spec_field == "team" else f"{spec_field}: {message}")


def initial_from_workload(workload: Workload, *, show_env_values: bool = True) -> dict[str, Any]:
    """The launch form filled in as `workload` was asked for (Clone); a teammate's clone gets the
    environment's names with empty values (only the owner sees them)."""
    limit, unit = _in_units(workload.time_limit_seconds)
    return {
        "name": workload.name,
        "kind": workload.kind,
        "catalog_image": str(workload.catalog_image_id) if workload.catalog_image_id else CUSTOM_IMAGE,
        "image": "" if workload.catalog_image_id else workload.image,
        "gpu_type": workload.gpu_type.slug,
        "gpu_count": workload.gpus_per_node,
        "nodes": workload.nodes,
        "topology": workload.topology,
        "command": join_args(workload.command),
        "args": join_args(workload.args),
        "env": [
            {"name": e.get("name", ""), "value": e.get("value", "") if show_env_values else ""}
            for e in workload.env or []
        ],
        "port": workload.port,
        "time_limit": limit,
        "time_limit_unit": unit,
        "priority": workload.priority or None,
        "restartable": workload.restartable,
        "retry_limit": workload.retry_limit,
        "retryable_exit_codes": ", ".join(str(c) for c in workload.retryable_exit_codes or []),
        "checkpoint_workspace": workload.checkpoint_workspace,
        "secrets": [ref["name"] for ref in workload.secrets or []],
        "secret_env": {ref["name"]: ref.get("env") or "" for ref in workload.secrets or []},
    }


def _in_units(seconds: int) -> tuple[int, str]:
    """A time limit in the largest unit the form offers that divides it (else whole minutes, at least one)."""
    for name in ("days", "hours", "minutes"):
        if seconds % TIME_UNITS[name] == 0:
            return seconds // TIME_UNITS[name], name
    return max(1, round(seconds / 60)), "minutes"


STATE_FILTERS = [("", "Any state"), ("active", "Active (not finished)"), ("finished", "Finished")] + [
    (value, label) for value, label in State.choices
]


class WorkloadFilterForm(forms.Form):
    scope = forms.ChoiceField(choices=[("mine", "Mine"), ("team", "My team's")], required=False, label="Whose")
    state = forms.ChoiceField(choices=STATE_FILTERS, required=False)
    kind = forms.ChoiceField(choices=[("", "Any kind"), *Kind.choices], required=False)
    gpu_type = forms.ChoiceField(required=False, label="GPU type")

    def __init__(self, *args: Any, gpu_types: list[GpuType], **kwargs: Any) -> None:
        kwargs.setdefault("label_suffix", "")
        super().__init__(*args, **kwargs)
        self.fields["gpu_type"].choices = [("", "Any GPU type")] + [(t.slug, t.display_name) for t in gpu_types]


class UsageRangeForm(forms.Form):
    """The usage page's days; the range rule is jobs.services.usage.reports.day_range (both ends inclusive)."""

    start = forms.DateField(label="From", widget=forms.DateInput(attrs={"type": "date"}))
    end = forms.DateField(label="To", widget=forms.DateInput(attrs={"type": "date"}))

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("label_suffix", "")
        super().__init__(*args, **kwargs)

    @staticmethod
    def default_range() -> tuple[date, date]:
        return reports.recent_days(timezone.localdate())

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        start, end = cleaned.get("start"), cleaned.get("end")
        if start and end:
            try:
                cleaned["days"] = reports.day_range(start, end)
            except reports.RangeInvalid as exc:
                self.add_error(exc.field, exc.message)
        return cleaned


class TeamSharingForm(forms.Form):
    """A manager's rules for sharing inside the team: caps per member, and fair-share ordering."""

    fair_share = forms.BooleanField(
        required=False,
        label="Fair share",
        help_text="Order the queue by each member's recent GPU-hours (least first) instead of first come, first served.",
    )
    # The bounds are the model's (jobs.models.teams), which Django admin enforces too.
    half_life_hours = forms.IntegerField(
        min_value=1,
        max_value=MAX_HALF_LIFE_HOURS,
        label="Fair-share half-life (hours)",
        help_text="Past usage counts half after this.",
    )
    user_max_queued = forms.IntegerField(
        required=False,
        min_value=1,
        max_value=MAX_PER_MEMBER,
        label="Waiting workloads per member",
        help_text="Empty: no cap.",
    )

    def __init__(self, *args: Any, team, quotas: list, **kwargs: Any) -> None:
        kwargs.setdefault("label_suffix", "")
        kwargs.setdefault(
            "initial",
            {
                "fair_share": team.fair_share,
                "half_life_hours": team.fair_share_half_life_hours,
                "user_max_queued": team.user_max_queued,
                **{f"user_max_gpus_{q.gpu_type.slug}": q.user_max_gpus for q in quotas},
            },
        )
        super().__init__(*args, **kwargs)
        self.quotas = quotas
        for q in quotas:
            self.fields[f"user_max_gpus_{q.gpu_type.slug}"] = forms.IntegerField(
                required=False,
                min_value=1,
                max_value=MAX_PER_MEMBER,
                label=f"{q.gpu_type.display_name} GPUs per member at once",
                help_text="Empty: no cap.",
            )

    def settings(self) -> dict[str, Any]:
        data = self.cleaned_data
        return {
            "fair_share": bool(data.get("fair_share")),
            "half_life_hours": data["half_life_hours"],
            "user_max_queued": data.get("user_max_queued"),
            "user_max_gpus": {q.gpu_type_id: data.get(f"user_max_gpus_{q.gpu_type.slug}") for q in self.quotas},
        }


def _in_words(seconds: int) -> str:
    """86400 -> "24 hours", 5400 -> "90 minutes": a default time limit as the form's help text says it."""
    if seconds % 3600 == 0:
        return f"{seconds // 3600} hour{'s' if seconds != 3600 else ''}"
    return f"{seconds // 60} minutes"


class SecretForm(forms.Form):
    """Store or replace a secret. The value is never rendered back (render_value=False)."""

    name = forms.CharField(
        max_length=MAX_SECRET_NAME,
        help_text="Lowercase letters, digits and '-'; how a launch refers to it. The same name replaces it.",
    )
    value = forms.CharField(
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "off"}),
        strip=False,
        help_text="Stored in Kubernetes only; never shown again.",
    )
    shared = forms.BooleanField(required=False, label="Shared with the team", help_text="Team managers only.")


class MemberInviteForm(forms.Form):
    """Add an existing portal user to the acting team (identity.members checks the rest)."""

    username = forms.CharField(max_length=150, help_text="Their portal username; they must have signed in once.")
    role = forms.ChoiceField(choices=Role.choices, initial=Role.MEMBER)


class MemberRoleForm(forms.Form):
    role = forms.ChoiceField(choices=Role.choices)
