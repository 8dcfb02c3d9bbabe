"""Registry pull passwords were kept in the clear: seal every stored one to the engine's public key.

Needs PORTAL_SEAL_PUBLIC_KEY when any row holds a password (the chart's migration Job has it); without it
the migration stops, naming the setting, and nothing changes. Going back opens them again, which needs
the private key (PORTAL_SEAL_PRIVATE_KEY) in the process that migrates.
"""

from django.conf import settings
from django.db import migrations, models

from portal import sealing


def seal_passwords(apps, schema_editor):
    registries = apps.get_model("jobs", "AllowedRegistry").objects.exclude(pull_password="")
    if not registries.exists():
        return
    if not settings.PORTAL_SEAL_PUBLIC_KEY:
        raise sealing.SealError(
            f"{registries.count()} registry pull password(s) are stored in the clear and must be sealed: set "
            f"PORTAL_SEAL_PUBLIC_KEY for this migration ({sealing.HOW_TO_MAKE})"
        )
    for registry in registries:
        registry.pull_password_sealed = sealing.seal(registry.pull_password)
        registry.pull_password = ""
        registry.save(update_fields=["pull_password", "pull_password_sealed"])


def open_passwords(apps, schema_editor):
    for registry in apps.get_model("jobs", "AllowedRegistry").objects.exclude(pull_password_sealed=""):
        registry.pull_password = sealing.unseal(registry.pull_password_sealed)
        registry.save(update_fields=["pull_password"])


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0016_sealed_secrets"),
    ]

    operations = [
        migrations.AddField(
            model_name="allowedregistry",
            name="pull_password_sealed",
            field=models.TextField(blank=True, editable=False),
        ),
        migrations.RunPython(seal_passwords, open_passwords),
        migrations.RemoveField(
            model_name="allowedregistry",
            name="pull_password",
        ),
    ]
