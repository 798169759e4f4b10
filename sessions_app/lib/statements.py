"""The statements an append runs on every request, compiled once instead of per call.

On SQLite the ORM spends longer building a query than the database spends
running it (about 0.3 ms each for the locked read and the update of the
session, a fifth of a single append; docs/performance.md). These run the
ORM's own SQL and converters, compiled once per database connection, and
give the same instances and stored values as the calls they stand for
(tests/sessions_app/lib/test_statements.py compares them on each backend).

They go to the driver's own connection (`execute`, `execute_many`): Django's
cursor wrapper converted each statement's placeholders again and looked its
connection up again on every call, about a third of an append's database
call on SQLite. On PostgreSQL they take a cursor that binds parameters on the
server, so that they are prepared once per connection (the settings'
`prepare_threshold`) instead of parsed and planned on every append; Django's
cursors bind on the client and cannot be prepared. Errors are still Django's
(`wrap_database_errors`), and while queries are being logged (DEBUG, a test capturing them) they take
Django's cursor as before, so they are counted and shown.
"""

from __future__ import annotations

import contextlib
import functools
import weakref
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

import psycopg
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.db.backends.sqlite3.base import FORMAT_QMARK_REGEX
from django.db.models import Model, QuerySet


def fetch_one(sql: str, params: Sequence) -> tuple | None:
    """Run one statement (Django's `%s` placeholders) on the default connection; its first row, or None."""
    with _cursor() as (cursor, driver):
        cursor.execute(_driver_sql(sql, driver), params)
        return cursor.fetchone()


def execute(sql: str, params: Sequence) -> None:
    """Run one statement that returns no rows."""
    with _cursor() as (cursor, driver):
        cursor.execute(_driver_sql(sql, driver), params)


def execute_counted(sql: str, params: Sequence) -> int:
    """Run one statement that returns no rows; the number of rows it wrote."""
    with _cursor() as (cursor, driver):
        cursor.execute(_driver_sql(sql, driver), params)
        return cursor.rowcount


def execute_many(sql: str, rows: Sequence[Sequence]) -> None:
    """Run one statement once per row of parameters, as `cursor.executemany`."""
    with _cursor() as (cursor, driver):
        if len(rows) == 1:  # psycopg's executemany enters and leaves a pipeline: a tenth of a single append's CPU
            cursor.execute(_driver_sql(sql, driver), rows[0])
        else:
            cursor.executemany(_driver_sql(sql, driver), rows)


@contextlib.contextmanager
def _cursor():
    """(cursor, paramstyle): the driver's own, or Django's while queries are logged."""
    db = connections[DEFAULT_DB_ALIAS]
    if db.queries_logged:
        with db.cursor() as cursor:
            yield cursor, "django"
        return
    db.close_if_health_check_failed()  # what Django's cursor() does first
    db.ensure_connection()
    with db.wrap_database_errors:
        cursor = psycopg.Cursor(db.connection) if db.vendor == "postgresql" else db.connection.cursor()
        try:
            yield cursor, db.vendor
        finally:
            cursor.close()


@functools.lru_cache(maxsize=256)
def _driver_sql(sql: str, driver: str) -> str:
    """The statement for `driver`'s cursor: on SQLite's own, what Django's converts it to on each call."""
    return FORMAT_QMARK_REGEX.sub("?", sql).replace("%%", "%") if driver == "sqlite" else sql


def insert_sql(model, fields: Sequence[str]) -> str:
    """INSERT INTO the model's table (the fields' columns) VALUES (%s, ...), quoted for this database."""
    return _insert_sql(model, tuple(fields), connection.vendor)


@functools.lru_cache(maxsize=64)
def _insert_sql(model, fields: tuple[str, ...], vendor: str) -> str:
    quote = connection.ops.quote_name
    columns = ", ".join(quote(model._meta.get_field(name).column) for name in fields)
    return f"INSERT INTO {quote(model._meta.db_table)} ({columns}) VALUES ({', '.join(['%s'] * len(fields))})"


def update_sql(model, fields: Sequence[str]) -> str:
    """UPDATE the model's table SET the fields' columns = %s, ... WHERE its key = %s (the values in that order)."""
    return _update_statement(model, tuple(fields), connection.vendor)[0]


def datetime_adapter() -> Callable[[datetime], object]:
    """What a DateTimeField sends this database for an aware datetime (its get_db_prep_save), without its per-call checks."""
    if connection.vendor == "sqlite" and settings.USE_TZ and connection.timezone_name == "UTC":
        return _sqlite_utc_text
    return connection.ops.adapt_datetimefield_value


def _sqlite_utc_text(moment: datetime) -> str:
    """What SQLite's adapt_datetimefield_value makes of an aware datetime: naive UTC text."""
    if moment.tzinfo is not UTC:
        moment = moment.astimezone(UTC)
    return moment.replace(tzinfo=None).isoformat(" ")


def get_for_update(model: type[Model], pk):
    """`model.objects.select_for_update().get(pk=pk)` inside the caller's transaction, or None for no such row."""
    reader = _locked_reader(model, pk)
    found = _read_locked(reader, reader.sql, pk, [])
    return None if found is None else found[0]


def get(model: type[Model], pk):
    """`model.objects.get(pk=pk)` (its own columns; related rows load when read), or None for no such row."""
    reader = _locked_reader(model, pk, lock=False)
    found = _read_locked(reader, reader.sql, pk, [])
    return None if found is None else found[0]


def rows(name: str, build: Callable[..., QuerySet], params: Sequence, *, bound: Sequence | None = None) -> list[tuple]:
    """The rows of `build(*params)`, a `values_list` queryset, its SQL compiled once per connection
    under `name` and run again with other `params`.

    `bound` is what the SQL takes for them, in its order (default: `params` themselves, for plain
    str and int, each used once, in that order); checked against what Django sends when the SQL is
    compiled, so a query whose parameters differ fails at once. Anything Django writes into the SQL
    itself, a slice's LIMIT, belongs in `name`; so does any value that changes the SQL's shape, which
    a later call must never pass: None (IS NULL), a number outside its field's range (Django drops
    the condition), an empty list. The values are converted as the queryset would.
    """
    bound = list(params if bound is None else bound)
    db = connections[DEFAULT_DB_ALIAS]
    compiled = _compiled.setdefault(db, {})
    if (found := compiled.get(name)) is None:
        if len(compiled) >= 128:  # names with a LIMIT in them: a bound, not a cache of every limit ever asked
            compiled.clear()
        compiler = build(*params).query.get_compiler(connection=db)
        sql, sent = compiler.as_sql()
        assert list(sent) == bound, (name, sent, bound)  # the SQL takes the params as given
        found = compiled[name] = (sql, compiler, compiler.get_converters([column for column, _, _ in compiler.select]))
    sql, compiler, converters = found
    with _cursor() as (cursor, driver):
        cursor.execute(_driver_sql(sql, driver), bound)
        fetched = cursor.fetchall()
    return [tuple(row) for row in compiler.apply_converters(fetched, converters)] if converters else fetched


def get_for_update_joined(model: type[Model], pk, *, columns: str, joins: str, params: Sequence) -> tuple[Model, tuple] | None:
    """`get_for_update` with more columns from other tables, read in the same statement.

    `columns` and `joins` are SQL that name the model's table by its name, with
    `%s` placeholders for `params` in that order. Only the model's row is locked.
    The instance and the values of `columns` (as the driver gives them), or None
    for no such row."""
    reader = _locked_reader(model, pk)
    return _read_locked(reader, reader.joined_sql(columns, joins), pk, params)


def _read_locked(reader: _Reader, sql: str, pk, params: Sequence) -> tuple[Model, tuple] | None:
    db = connections[DEFAULT_DB_ALIAS]
    row = fetch_one(sql, [*params, reader.model._meta.pk.get_db_prep_value(pk, db)])
    if row is None:
        return None
    width = len(reader.attnames)
    (values,) = reader.compiler.apply_converters([row[:width]], reader.converters)
    return reader.model.from_db(db.alias, reader.attnames, values), row[width:]


def save_fields(instance: Model, fields: Sequence[str]) -> None:
    """`instance.save(update_fields=fields)` for a row that exists, on a model whose save sends
    nothing anyone listens to and whose fields compute nothing on save (no auto_now)."""
    db = connections[DEFAULT_DB_ALIAS]
    sql, columns = _update_statement(type(instance), tuple(fields), db.vendor)
    values = [field.get_db_prep_save(getattr(instance, field.attname), db) for field in columns]
    execute(sql, [*values, instance._meta.pk.get_db_prep_value(instance.pk, db)])


class _Reader:
    def __init__(self, model: type[Model], pk, *, lock: bool = True):
        db = connections[DEFAULT_DB_ALIAS]
        self.model = model
        queryset = model.objects.filter(pk=pk)
        queryset = queryset.select_for_update() if lock else queryset
        self.compiler = queryset.query.get_compiler(connection=db)
        self.sql, params = self.compiler.as_sql()
        assert len(params) == 1, params  # the key, bound anew on each call
        columns = [column for column, _, _ in self.compiler.select]
        self.attnames = [column.target.attname for column in columns]
        self.converters = self.compiler.get_converters(columns)
        # The joined statement's parts: the same columns, and a lock on this table's row only.
        quote = db.ops.quote_name
        self.table, self.key = quote(model._meta.db_table), quote(model._meta.pk.column)
        self.columns = ", ".join(sql for _, (sql, _), _ in self.compiler.select)
        self.lock = " " + db.ops.for_update_sql(of=(self.table,)) if lock and db.features.has_select_for_update else ""
        self.joined: dict[tuple[str, str], str] = {}

    def joined_sql(self, columns: str, joins: str) -> str:
        if (sql := self.joined.get((columns, joins))) is None:
            sql = f"SELECT {self.columns}, {columns} FROM {self.table} {joins} WHERE {self.table}.{self.key} = %s{self.lock}"
            self.joined[columns, joins] = sql
        return sql


# Per connection object: converters are bound to their connection, and each database thread has its own.
_readers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_compiled: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _locked_reader(model: type[Model], pk, *, lock: bool = True) -> _Reader:
    readers = _readers.setdefault(connections[DEFAULT_DB_ALIAS], {})
    if (reader := readers.get((model, lock))) is None:
        reader = readers[model, lock] = _Reader(model, pk, lock=lock)
    return reader


@functools.lru_cache(maxsize=64)
def _update_statement(model: type[Model], fields: tuple[str, ...], vendor: str) -> tuple[str, list]:
    quote = connection.ops.quote_name
    columns = [model._meta.get_field(name) for name in fields]
    assignments = ", ".join(f"{quote(field.column)} = %s" for field in columns)
    return f"UPDATE {quote(model._meta.db_table)} SET {assignments} WHERE {quote(model._meta.pk.column)} = %s", columns
