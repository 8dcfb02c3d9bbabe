from django.db import migrations, models

DEVENV_ENTRYPOINT = "/usr/local/bin/gpuportal-devenv"  # localcluster.images.DEVENV_ENTRYPOINT, as it was here


def mark_dev_environments(apps, schema_editor):
    """Catalog entries seeded before the field existed that start the portal's dev environment run sshd."""
    CatalogImage = apps.get_model("jobs", "CatalogImage")
    for entry in CatalogImage.objects.all().only("id", "default_command"):
        if (entry.default_command or [None])[0] == DEVENV_ENTRYPOINT:
            CatalogImage.objects.filter(id=entry.id).update(runs_sshd=True)


class Migration(migrations.Migration):
    dependencies = [("jobs", "0027_team_sharing_and_priority_bounds")]

    operations = [
        migrations.AddField(
            model_name="catalogimage",
            name="runs_sshd",
            field=models.BooleanField(
                default=False,
                help_text="The image runs an SSH server on GPUPORTAL_SSH_PORT with GPUPORTAL_SSH_AUTHORIZED_KEYS (the "
                "portal's dev environment does): `gpuportal ssh-config` lists its running services, and their pages "
                "offer SSH and the Terminal.",
            ),
        ),
        migrations.RunPython(mark_dev_environments, migrations.RunPython.noop),
    ]
