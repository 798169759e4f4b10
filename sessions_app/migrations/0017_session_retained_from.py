"""Retention keeps its own clock: Session.retained_from, what the sweep counts a project's retention from.

It is the latest of the session's creation or import, its last event received, its last note added or
edited and its last recovery; until now the sweep read last_activity_at, which for an import is its
events' claimed time, and which notes never moved. Existing sessions get the latest of created_at,
last_activity_at, recovered_at and their notes' updated_at, never later than now (an imported note
may claim any time).
"""

import django.core.validators
import django.utils.timezone
from django.db import migrations, models
from django.db.models import F, OuterRef, Subquery, Value
from django.db.models.functions import Coalesce, Greatest, Least


def retained_from_what_is_known(apps, schema_editor):
    Session, Note = apps.get_model("sessions_app", "Session"), apps.get_model("sessions_app", "Note")
    last_note = Note.objects.filter(session_id=OuterRef("pk")).order_by("-updated_at").values("updated_at")[:1]
    # Greatest is NULL on SQLite when any argument is: each nullable one falls back to created_at.
    latest = Greatest(
        F("created_at"),
        F("last_activity_at"),
        Coalesce(F("recovered_at"), F("created_at")),
        Coalesce(Subquery(last_note, output_field=models.DateTimeField()), F("created_at")),
        output_field=models.DateTimeField(),
    )
    now = Value(django.utils.timezone.now(), output_field=models.DateTimeField())
    Session.objects.update(retained_from=Least(latest, now, output_field=models.DateTimeField()))


class Migration(migrations.Migration):

    dependencies = [
        ("sessions_app", "0016_notify"),
    ]

    operations = [
        migrations.AddField(
            model_name="session",
            name="retained_from",
            field=models.DateTimeField(default=django.utils.timezone.now),
        ),
        migrations.AddIndex(
            model_name="session",
            index=models.Index(fields=["project", "retained_from", "id"], name="session_retention_idx"),
        ),
        migrations.AlterField(
            model_name="project",
            name="retention_days",
            field=models.PositiveIntegerField(
                blank=True,
                help_text=(
                    "Delete sessions left alone for longer than this many days: no event received, note written or recovery"
                    " since their creation or import (empty: keep them forever)"
                ),
                null=True,
                validators=[django.core.validators.MinValueValidator(1), django.core.validators.MaxValueValidator(36500)],
            ),
        ),
        # After the index: on PostgreSQL the table takes no DDL once rows changed in this transaction.
        migrations.RunPython(retained_from_what_is_known, migrations.RunPython.noop),
    ]
