import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('identity', '0002_membership_history_outlives'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name='membershipchange',
            name='changed_by',
            field=models.ForeignKey(blank=True, help_text='Who made the change in the portal (a manager on the members page, an admin).', null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL),
        ),
        migrations.AddField(
            model_name='membershipchange',
            name='changed_by_name',
            field=models.CharField(blank=True, help_text='Their username at the time.', max_length=150),
        ),
    ]
