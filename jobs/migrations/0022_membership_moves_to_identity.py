# Membership (and its Role choices) moved to identity, which keeps who is in which team. Only Django's
# record of where the model lives changes: the table keeps its name (jobs_membership) and its rows.

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0021_usage_recent_end_index"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name="Membership")],
            database_operations=[],
        ),
    ]
