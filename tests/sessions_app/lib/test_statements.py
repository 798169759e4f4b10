"""sessions_app.lib.statements: the append's locked read and update, compiled once, as the ORM would run them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from datetime import UTC, datetime

import pytest
from django.db import IntegrityError, connection, transaction

from sessions_app import services
from sessions_app.lib import statements
from sessions_app.models import Session
from tests.servers import PROJECT_DIR, database_url

pytestmark = pytest.mark.django_db(transaction=True)

ODD_METADATA = {"text": "<b>é</b>\u2028", "n": 10**18, "f": 0.1, "nested": {"list": [None, True, "x"]}}


def field_values(session: Session) -> dict:
    return {field.attname: getattr(session, field.attname) for field in Session._meta.concrete_fields}


def make(session_id: str, **changes) -> Session:
    services.create_session(session_id=session_id, agent_name="agent", metadata=ODD_METADATA)
    Session.objects.filter(pk=session_id).update(**changes)
    return Session.objects.get(pk=session_id)


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"turn_stack": [3, 9], "step_stack": [[4, 5]], "interrupted": True, "stray_turn_ends": [7], "event_count": 12},
        {"last_event_at": datetime(2025, 1, 2, 3, 4, 5, 678901, tzinfo=UTC), "repeated_failures_at": datetime(2030, 1, 1, tzinfo=UTC), "auto_checked_count": 0},
    ],
)
def test_get_for_update_reads_the_row_as_the_orm_does(changes):
    make("parent")
    orm = make("s", parent_id="parent", **changes)
    with transaction.atomic():
        read = statements.get_for_update(Session, "s")
    assert field_values(read) == field_values(orm)
    assert not read._state.adding and read._state.db == orm._state.db
    assert read.parent.pk == "parent"  # relations load as on any instance


@pytest.mark.parametrize("changes", [{}, {"turn_stack": [3], "interrupted": True, "last_event_at": datetime(2025, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)}])
def test_get_reads_the_row_as_the_orm_does_without_a_lock(changes):
    make("parent")
    orm = make("s", parent_id="parent", **changes)
    read = statements.get(Session, "s")
    assert field_values(read) == field_values(orm)
    assert read.parent.pk == "parent" and read.project.pk == orm.project_id  # relations load when read
    assert statements.get(Session, "nowhere") is None
    assert "FOR UPDATE" not in statements._locked_reader(Session, "s", lock=False).sql


def test_rows_are_the_querysets_values_converted_and_compiled_once():
    make("a", last_event_at=datetime(2025, 1, 2, 3, 4, 5, 6, tzinfo=UTC))
    make("b", event_count=5)

    def build(agent_name, event_count):
        return Session.objects.filter(agent_name=agent_name).filter(event_count__gte=event_count).order_by("id").values_list("id", "metadata", "last_event_at")

    for params in (["agent", 0], ["agent", 3], ["nobody", 0]):
        assert statements.rows("sessions_test", build, params) == list(build(*params))
    assert [row[1] for row in statements.rows("sessions_test", build, ["agent", 0])] == [ODD_METADATA, ODD_METADATA]


def test_rows_refuse_params_the_sql_would_take_in_another_order():
    """Django orders a filter()'s keyword arguments: the compiled SQL would bind them to the wrong
    columns. The first use says so instead of reading other rows."""
    def build(event_count, agent_name):
        return Session.objects.filter(event_count__gte=event_count, agent_name=agent_name).values_list("id")

    with pytest.raises(AssertionError):
        statements.rows("sessions_test_order", build, [0, "agent"])


def test_get_for_update_of_no_such_row_is_none():
    with transaction.atomic():
        assert statements.get_for_update(Session, "nowhere") is None


JOIN_PARENT = "LEFT JOIN sessions_app_session p ON p.id = sessions_app_session.parent_id AND p.agent_name = %s"


def test_get_for_update_joined_reads_the_row_as_get_for_update_does_and_the_joined_columns():
    make("parent", event_count=7)
    make("s", parent_id="parent", turn_stack=[3], event_count=4)
    make("orphan")
    with transaction.atomic():
        read, extra = statements.get_for_update_joined(Session, "s", columns="p.event_count, %s", joins=JOIN_PARENT, params=["x", "agent"])
        assert field_values(read) == field_values(statements.get_for_update(Session, "s"))
        assert extra == (7, "x")
        # A join that finds nothing still gives the row, with the joined columns empty.
        read, extra = statements.get_for_update_joined(Session, "orphan", columns="p.event_count", joins=JOIN_PARENT, params=["agent"])
        assert read.pk == "orphan" and extra == (None,)
        assert statements.get_for_update_joined(Session, "nowhere", columns="p.event_count", joins=JOIN_PARENT, params=["agent"]) is None


@pytest.mark.skipif("connection.vendor != 'postgresql'", reason="PostgreSQL only: SQLite locks the whole database at BEGIN")
def test_get_for_update_joined_locks_the_models_row_and_not_the_joined_ones():
    """Two appends with one token on two sessions must not wait on each other for the token's row."""
    make("parent")
    make("s", parent_id="parent")
    outcome = {}

    def from_another_connection():
        try:
            with transaction.atomic():
                for session_id in ("parent", "s"):
                    try:
                        with transaction.atomic():
                            statements.fetch_one("SELECT id FROM sessions_app_session WHERE id = %s FOR UPDATE NOWAIT", [session_id])
                        outcome[session_id] = "free"
                    except Exception as error:  # noqa: BLE001 - the lock's refusal is what is looked for
                        outcome[session_id] = type(error).__name__
        finally:
            connection.close()

    with transaction.atomic():
        statements.get_for_update_joined(Session, "s", columns="p.event_count", joins=JOIN_PARENT, params=["agent"])
        other = threading.Thread(target=from_another_connection)
        other.start()
        other.join()
    assert outcome == {"parent": "free", "s": "OperationalError"}


def test_each_thread_reads_through_its_own_connection():
    make("s")
    seen = []

    def read():
        with transaction.atomic():
            seen.append(statements.get_for_update(Session, "s").agent_name)
        connection.close()

    threads = [threading.Thread(target=read) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == ["agent"] * 3


def test_save_fields_stores_what_save_with_update_fields_stores():
    fields = ["event_count", "turn_stack", "step_stack", "interrupted", "stray_turn_ends", "last_event_at", "last_activity_at", "metadata"]
    by_orm, by_statement = make("orm"), make("statement")
    for session in (by_orm, by_statement):
        session.event_count = 41
        session.turn_stack = [1, 2**40]
        session.step_stack = [[2, 3]]
        session.interrupted = True
        session.stray_turn_ends = []
        session.last_event_at = datetime(2025, 6, 1, 12, 0, 0, 1, tzinfo=UTC)
        session.last_activity_at = datetime(2025, 6, 1, 12, 0, 0, 2, tzinfo=UTC)
        session.metadata = {**ODD_METADATA, "changed": "\u0001"}
        session.agent_name = "not saved"  # not among the fields
    by_orm.save(update_fields=fields)
    statements.save_fields(by_statement, fields)
    stored = {s.pk: s for s in Session.objects.filter(pk__in=["orm", "statement"])}
    expected = field_values(stored["orm"]) | {"id": "statement", "created_at": stored["statement"].created_at, "retained_from": stored["statement"].retained_from}
    assert field_values(stored["statement"]) == expected
    assert stored["statement"].agent_name == "agent"
    with connection.cursor() as cursor:  # the very text or values in the columns, not only what reads back
        cursor.execute("SELECT id, turn_stack, metadata, last_event_at FROM sessions_app_session WHERE id IN ('orm', 'statement') ORDER BY id")
        raw = cursor.fetchall()
    assert raw[0][1:] == raw[1][1:]


def test_statements_on_the_drivers_connection_fail_with_djangos_errors():
    from django.db import OperationalError, ProgrammingError

    make("s")
    with pytest.raises(IntegrityError), transaction.atomic():
        statements.execute_many("INSERT INTO sessions_app_session (id) VALUES (%s)", [["s"]])  # the key is taken
    with pytest.raises((ProgrammingError, OperationalError)):
        statements.fetch_one("SELECT no_such_column FROM sessions_app_session WHERE id = %s", ["s"])
    assert statements.fetch_one("SELECT id FROM sessions_app_session WHERE id = %s", ["s"]) == ("s",)
    assert statements.fetch_one("SELECT id FROM sessions_app_session WHERE id = %s", ["nope"]) is None


@pytest.fixture
def scratch_table():
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE test_scratch_rows (id varchar(20) PRIMARY KEY, n integer NOT NULL)")
    yield "test_scratch_rows"
    with connection.cursor() as cursor:
        cursor.execute("DROP TABLE test_scratch_rows")


@pytest.mark.parametrize("ids", [["one"], ["a", "b", "c"]])
def test_execute_many_stores_each_row_once_whether_one_or_several(scratch_table, ids):
    """One row takes the cursor's execute (no pipeline on psycopg), several its executemany: the same rows either way."""
    statements.execute_many(f"INSERT INTO {scratch_table} (id, n) VALUES (%s, %s)", [[key, len(key)] for key in ids])
    assert statements.fetch_one(f"SELECT count(*), sum(n) FROM {scratch_table}", []) == (len(ids), sum(map(len, ids)))
    with pytest.raises(IntegrityError), transaction.atomic():
        statements.execute_many(f"INSERT INTO {scratch_table} (id, n) VALUES (%s, %s)", [["new", 1], [ids[-1], 0]])
    assert statements.fetch_one(f"SELECT count(*) FROM {scratch_table}", []) == (len(ids),)


def test_while_queries_are_logged_the_appends_statements_are_among_them():
    """DEBUG and the tests' query counters see the append's statements, as they saw Django's cursor run them."""
    from django.test.utils import CaptureQueriesContext

    from sessions_app.log.events import validate_batch

    make("s")
    with CaptureQueriesContext(connection) as captured:
        services.append_events(session_id="s", events=validate_batch([{"type": "turn_start", "data": {"turn": 1}}]))
    text = "\n".join(query["sql"] for query in captured.captured_queries)
    assert "FOR UPDATE" in text or connection.vendor == "sqlite"  # the locked read (SQLite locks at BEGIN)
    for table in ("sessions_app_event", "sessions_app_agenthour", "sessions_app_session"):
        assert table in text, (table, text)
    assert any(query["sql"].startswith("UPDATE") for query in captured.captured_queries), text


APPEND_AND_LIST_PREPARED = """
import django, json
django.setup()
from django.db import connection
from sessions_app import services
from sessions_app.log.events import validate_batch
services.create_session(session_id="prepared", agent_name="agent")
for n in range(8):
    services.append_events(session_id="prepared", events=validate_batch([{"type": "user_message", "data": {"content": str(n)}}]))
with connection.cursor() as cursor:
    cursor.execute("SELECT statement FROM pg_prepared_statements WHERE NOT from_sql")
    print(json.dumps([row[0] for row in cursor.fetchall()]))
"""


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL only: SQLite has no prepared statements")
@pytest.mark.parametrize("switch", [None, "0"])
def test_on_postgresql_the_appends_statements_are_prepared_unless_turned_off(switch):
    """Each connection plans the append's statements once (its locked read was half the database's CPU per
    single append); TURNLOG_DB_PREPARED_STATEMENTS=0, for PgBouncer before 1.21, prepares nothing."""
    env = {k: v for k, v in os.environ.items() if k != "TURNLOG_DB_PREPARED_STATEMENTS"}
    env.update(DATABASE_URL=database_url(connection.settings_dict), DJANGO_SETTINGS_MODULE="dashboard.settings")
    if switch is not None:
        env["TURNLOG_DB_PREPARED_STATEMENTS"] = switch
    run = subprocess.run([sys.executable, "-c", APPEND_AND_LIST_PREPARED], cwd=PROJECT_DIR, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    prepared = json.loads(run.stdout.strip().splitlines()[-1])
    assert Session.objects.get(pk="prepared").event_count == 8  # stored either way
    if switch == "0":
        assert prepared == []
    else:
        assert any(sql.startswith("SELECT") and "FOR UPDATE" in sql for sql in prepared), prepared
        assert any(sql.startswith('INSERT INTO "sessions_app_event"') for sql in prepared), prepared
        assert any(sql.startswith('UPDATE "sessions_app_session"') for sql in prepared), prepared
