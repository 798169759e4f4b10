"""The search index is filled after the append commits (services/search_index.py), per session up to
Session.search_indexed_seq; every search first indexes what is still pending.

Until now each append indexed its own events, and events stored before 0012 waited for
`manage.py search_index` (sessions_app_search_backfill). So every session is indexed to its
length, except those with events the backfill had not reached: they are indexed from the
first of those (a fork's prefix excepted: its parent's rows answer it). The backfill table goes.
"""

from django.db import migrations, models

BACKFILL_DROP = "DROP TABLE sessions_app_search_backfill"
BACKFILL_CREATE = [
    "CREATE TABLE sessions_app_search_backfill (id integer PRIMARY KEY, done bigint NOT NULL, until bigint NOT NULL)",
    "INSERT INTO sessions_app_search_backfill (id, done, until)"
    " SELECT 1, COALESCE(MAX(id), 0), COALESCE(MAX(id), 0) FROM sessions_app_event",
]


def indexed_so_far(apps, schema_editor):
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("UPDATE sessions_app_session SET search_indexed_seq = event_count")
        cursor.execute("SELECT done, until FROM sessions_app_search_backfill WHERE id = 1")
        done, until = cursor.fetchone() or (0, 0)
        if done < until:
            cursor.execute(
                "UPDATE sessions_app_session SET search_indexed_seq = ("
                " SELECT MIN(e.seq) FROM sessions_app_event e"
                " WHERE e.session_id = sessions_app_session.id AND e.id > %s AND e.id <= %s AND e.seq >= sessions_app_session.seed_length)"
                " WHERE id IN (SELECT session_id FROM sessions_app_event WHERE id > %s AND id <= %s)"
                " AND EXISTS (SELECT 1 FROM sessions_app_event e WHERE e.session_id = sessions_app_session.id"
                " AND e.id > %s AND e.id <= %s AND e.seq >= sessions_app_session.seed_length)",
                [done, until] * 3,
            )
    schema_editor.execute(BACKFILL_DROP)


def backfill_table_back(apps, schema_editor):
    for sql in BACKFILL_CREATE:
        schema_editor.execute(sql)


class Migration(migrations.Migration):

    dependencies = [
        ("sessions_app", "0013_ledger_by_session"),
    ]

    operations = [
        migrations.AddField(
            model_name="session",
            name="search_indexed_seq",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AddIndex(
            model_name="session",
            index=models.Index(
                condition=models.Q(("search_indexed_seq__lt", models.F("event_count"))),
                fields=["project"],
                name="session_search_pending_idx",
            ),
        ),
        # After the index: on PostgreSQL the table takes no DDL once rows changed in this transaction.
        migrations.RunPython(indexed_so_far, backfill_table_back),
    ]
