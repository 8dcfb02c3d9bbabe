"""Accounting integrity: finished, started workloads always have an end (existing rows closed at their
last state change first), and billing weights get a history (existing types' weights valid from the
beginning, so past usage keeps the weight it was billed at)."""

import datetime

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models
from django.db.models import F
from django.db.models.functions import Greatest

FINAL = ["SUCCEEDED", "FAILED", "CANCELLED"]


def close_open_intervals(apps, schema_editor):
    Workload = apps.get_model("jobs", "Workload")
    Workload.objects.filter(state__in=FINAL, started_at__isnull=False, finished_at__isnull=True).update(
        finished_at=Greatest(F("state_changed_at"), F("started_at"))
    )


def record_current_weights(apps, schema_editor):
    GpuType = apps.get_model("jobs", "GpuType")
    BillingWeight = apps.get_model("jobs", "BillingWeight")
    BillingWeight.objects.bulk_create(
        BillingWeight(gpu_type=t, valid_from=datetime.date(2000, 1, 1), weight=t.billing_weight)
        for t in GpuType.objects.all()
    )


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0003_workload_pod_uid_index"),
    ]

    operations = [
        migrations.CreateModel(
            name="BillingWeight",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("valid_from", models.DateField()),
                ("weight", models.DecimalField(decimal_places=3, max_digits=6)),
                ("recorded_at", models.DateTimeField(default=django.utils.timezone.now)),
                (
                    "gpu_type",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="weight_history", to="jobs.gputype"
                    ),
                ),
            ],
            options={"ordering": ["gpu_type", "valid_from"]},
        ),
        migrations.AddConstraint(
            model_name="billingweight",
            constraint=models.UniqueConstraint(fields=("gpu_type", "valid_from"), name="one_weight_per_type_day"),
        ),
        migrations.RunPython(record_current_weights, migrations.RunPython.noop),
        migrations.RunPython(close_open_intervals, migrations.RunPython.noop),
        migrations.AddConstraint(
            model_name="workload",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("finished_at__isnull", True),
                    ("started_at__isnull", False),
                    ("state__in", ["SUCCEEDED", "FAILED", "CANCELLED"]),
                    _negated=True,
                ),
                name="wl_final_started_has_end",
            ),
        ),
    ]
