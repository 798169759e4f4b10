"""The search index: tables beside the log, written in the append transaction (services/search_index.py).

SQLite: contentless FTS5 tables keyed by the event's id (words: unicode61,
without positions; short fields: trigram) and a small FTS5 table of notes.
PostgreSQL: the same rows in plain tables, a `simple` tsvector with a GIN
index and the short fields with a pg_trgm GIN index. Events stored before
this migration are indexed by `manage.py search_index`, which resumes from
sessions_app_search_backfill (its `until` is the last event id before it).
"""

from django.db import migrations

SQLITE = [
    "CREATE VIRTUAL TABLE sessions_app_search_words USING fts5("
    "words, tokenize='unicode61 remove_diacritics 2', content='', detail='none', columnsize=0)",
    "CREATE VIRTUAL TABLE sessions_app_search_short USING fts5("
    "short, tokenize='trigram', content='', detail='full', columnsize=0)",
    "CREATE VIRTUAL TABLE sessions_app_search_notes USING fts5("
    "words, position UNINDEXED, tokenize='unicode61 remove_diacritics 2', detail='none')",
]
SQLITE_DROP = ["DROP TABLE sessions_app_search_notes", "DROP TABLE sessions_app_search_short", "DROP TABLE sessions_app_search_words"]

POSTGRESQL = [
    "CREATE EXTENSION IF NOT EXISTS pg_trgm",
    "CREATE TABLE sessions_app_search_event (event_id bigint PRIMARY KEY, words tsvector, short text)",
    "CREATE INDEX search_event_words_idx ON sessions_app_search_event USING gin (words)",
    "CREATE INDEX search_event_short_idx ON sessions_app_search_event USING gin (short gin_trgm_ops) WHERE short IS NOT NULL",
    "CREATE TABLE sessions_app_search_note (note_id bigint PRIMARY KEY, position bigint NOT NULL, words tsvector NOT NULL)",
    "CREATE INDEX search_note_words_idx ON sessions_app_search_note USING gin (words)",
]
POSTGRESQL_DROP = ["DROP TABLE sessions_app_search_note", "DROP TABLE sessions_app_search_event"]

BACKFILL = [
    "CREATE TABLE sessions_app_search_backfill (id integer PRIMARY KEY, done bigint NOT NULL, until bigint NOT NULL)",
    "INSERT INTO sessions_app_search_backfill (id, done, until)"
    " SELECT 1, 0, COALESCE(MAX(id), 0) FROM sessions_app_event",
]


def create(apps, schema_editor):
    for sql in (SQLITE if schema_editor.connection.vendor == "sqlite" else POSTGRESQL) + BACKFILL:
        schema_editor.execute(sql)


def drop(apps, schema_editor):
    for sql in (SQLITE_DROP if schema_editor.connection.vendor == "sqlite" else POSTGRESQL_DROP):
        schema_editor.execute(sql)
    schema_editor.execute("DROP TABLE sessions_app_search_backfill")


class Migration(migrations.Migration):

    dependencies = [
        ("sessions_app", "0011_call_ledger"),
    ]

    operations = [migrations.RunPython(create, drop)]
