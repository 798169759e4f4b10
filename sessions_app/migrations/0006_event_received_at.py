from django.db import migrations, models
from django.utils import timezone


def clamp_future_activity(apps, schema_editor):
    """Activity times copied from clocks that ran ahead are brought back to now.

    Before 0006 a session's activity time was the claimed time of its last event, so an agent
    whose clock read 2027 kept its session "running" and at the top of every list for good.
    From now on it is the server's receive time; existing events' receive times stay unknown.
    """
    Session = apps.get_model("sessions_app", "Session")
    now = timezone.now()
    Session.objects.filter(last_activity_at__gt=now).update(last_activity_at=now)


class Migration(migrations.Migration):

    dependencies = [
        ("sessions_app", "0005_recovery_strategies_agents"),
    ]

    operations = [
        migrations.AddField(
            model_name="event",
            name="received_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="session",
            name="last_received_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.RunPython(clamp_future_activity, migrations.RunPython.noop),
    ]
