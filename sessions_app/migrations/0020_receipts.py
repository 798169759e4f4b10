from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("sessions_app", "0019_verdict_views"),
    ]

    operations = [
        migrations.AddField(
            model_name="ledgercall",
            name="idempotency_key_rank",
            field=models.PositiveSmallIntegerField(blank=True, null=True),
        ),
    ]
