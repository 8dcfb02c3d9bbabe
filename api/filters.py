from __future__ import annotations

from datetime import UTC

import django_filters
from django import forms
from django_filters.fields import IsoDateTimeField, MultipleChoiceField

from jobs.models import Kind, State, Workload


class UtcDateTimeField(IsoDateTimeField):
    """ISO 8601, converted to UTC here: PostgreSQL refuses offsets beyond ±15:59 that ISO allows."""

    def to_python(self, value):
        parsed = super().to_python(value)
        try:
            return parsed.astimezone(UTC) if parsed is not None and parsed.tzinfo else parsed
        except OverflowError:
            raise forms.ValidationError("Date out of range.", code="invalid") from None


class UtcDateTimeFilter(django_filters.IsoDateTimeFilter):
    field_class = UtcDateTimeField


class StateField(MultipleChoiceField):
    """States in any case (`?state=running`); one it does not know is named with those it does."""

    default_error_messages = {
        "invalid_choice": "'%(value)s' is not a state; one of: " + ", ".join(State.values) + ".",
    }

    def to_python(self, value):
        return [state.upper() for state in super().to_python(value)]


class StateFilter(django_filters.MultipleChoiceFilter):
    field_class = StateField


class WorkloadFilter(django_filters.FilterSet):
    # distinct=False: one row per workload anyway, and SELECT DISTINCT would sort every matching row.
    state = StateFilter(choices=State.choices, distinct=False, help_text="One or more states (any case).")
    kind = django_filters.ChoiceFilter(choices=Kind.choices)
    gpu_type = django_filters.CharFilter(field_name="gpu_type__slug", help_text="GPU type slug.")
    owner = django_filters.CharFilter(field_name="owner__username", help_text="Owner's username.")
    team = django_filters.CharFilter(field_name="team__slug", help_text="Team slug.")
    created_after = UtcDateTimeFilter(field_name="created_at", lookup_expr="gte")
    created_before = UtcDateTimeFilter(field_name="created_at", lookup_expr="lt")

    class Meta:
        model = Workload
        fields = ["state", "kind", "gpu_type", "owner", "team", "created_after", "created_before"]
