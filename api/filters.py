from __future__ import annotations

import django_filters

from jobs.models import Kind, State, Workload


class WorkloadFilter(django_filters.FilterSet):
    state = django_filters.MultipleChoiceFilter(choices=State.choices, help_text="One or more states.")
    kind = django_filters.ChoiceFilter(choices=Kind.choices)
    gpu_type = django_filters.CharFilter(field_name="gpu_type__slug", help_text="GPU type slug.")
    owner = django_filters.CharFilter(field_name="owner__username", help_text="Owner's username.")
    team = django_filters.CharFilter(field_name="team__slug", help_text="Team slug.")
    created_after = django_filters.IsoDateTimeFilter(field_name="created_at", lookup_expr="gte")
    created_before = django_filters.IsoDateTimeFilter(field_name="created_at", lookup_expr="lt")

    class Meta:
        model = Workload
        fields = ["state", "kind", "gpu_type", "owner", "team", "created_after", "created_before"]
