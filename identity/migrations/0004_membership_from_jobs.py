# Membership (and its Role choices) moved here from jobs. Only Django's record of where the model lives
# changes: the table keeps its name (jobs_membership, db_table) and its rows, and its content type is
# relabelled, so admin history and permissions granted on memberships still point at it.

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


def relabel_content_type(apps, schema_editor, *, old: str, new: str) -> None:
    ContentType = apps.get_model("contenttypes", "ContentType")
    if not ContentType.objects.filter(app_label=new, model="membership").exists():
        ContentType.objects.filter(app_label=old, model="membership").update(app_label=new)


def forwards(apps, schema_editor) -> None:
    relabel_content_type(apps, schema_editor, old="jobs", new="identity")


def backwards(apps, schema_editor) -> None:
    relabel_content_type(apps, schema_editor, old="identity", new="jobs")


class Migration(migrations.Migration):
    dependencies = [
        ("contenttypes", "0002_remove_content_type_name"),
        ("identity", "0003_membership_change_by"),
        ("jobs", "0022_membership_moves_to_identity"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="Membership",
                    fields=[
                        ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                        ("role", models.CharField(choices=[("member", "Member"), ("manager", "Manager")], default="member", max_length=10)),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        ("user", models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="memberships", to=settings.AUTH_USER_MODEL)),
                        ("team", models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="memberships", to="jobs.team")),
                    ],
                    options={
                        "db_table": "jobs_membership",
                        "ordering": ["team__name", "user__username"],
                        "constraints": [models.UniqueConstraint(fields=("user", "team"), name="one_membership_per_team")],
                    },
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(forwards, backwards),
    ]
