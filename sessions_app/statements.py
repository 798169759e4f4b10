"""The statements an append runs on every request, compiled once instead of per call.

On SQLite the ORM spends longer building a query than the database spends
running it (about 0.3 ms each for the locked read and the update of the
session, a fifth of a single append; docs/benchmarks.md). These run the
ORM's own SQL and converters, compiled once per database connection, and
give the same instances and stored values as the calls they stand for
(tests/sessions_app/test_statements.py compares them on each backend).
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Sequence

from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.db.models import Model


def insert_sql(model, fields: Sequence[str]) -> str:
    """INSERT INTO the model's table (the fields' columns) VALUES (%s, ...), quoted for this database."""
    quote = connection.ops.quote_name
    columns = ", ".join(quote(model._meta.get_field(name).column) for name in fields)
    return f"INSERT INTO {quote(model._meta.db_table)} ({columns}) VALUES ({', '.join(['%s'] * len(fields))})"


def get_for_update(model: type[Model], pk):
    """`model.objects.select_for_update().get(pk=pk)` inside the caller's transaction, or None for no such row."""
    reader = _locked_reader(model, pk)
    with connection.cursor() as cursor:
        cursor.execute(reader.sql, [model._meta.pk.get_db_prep_value(pk, connection)])
        row = cursor.fetchone()
    if row is None:
        return None
    (values,) = reader.compiler.apply_converters([row], reader.converters)
    return model.from_db(connection.alias, reader.attnames, values)


def save_fields(instance: Model, fields: Sequence[str]) -> None:
    """`instance.save(update_fields=fields)` for a row that exists, on a model whose save sends
    nothing anyone listens to and whose fields compute nothing on save (no auto_now)."""
    sql, columns = _update_statement(type(instance), tuple(fields), connection.vendor)
    values = [field.get_db_prep_save(getattr(instance, field.attname), connection) for field in columns]
    with connection.cursor() as cursor:
        cursor.execute(sql, [*values, instance._meta.pk.get_db_prep_value(instance.pk, connection)])


class _Reader:
    def __init__(self, model: type[Model], pk):
        queryset = model.objects.select_for_update().filter(pk=pk)
        self.compiler = queryset.query.get_compiler(connection=connections[DEFAULT_DB_ALIAS])
        self.sql, params = self.compiler.as_sql()
        assert len(params) == 1, params  # the key, bound anew on each call
        columns = [column for column, _, _ in self.compiler.select]
        self.attnames = [column.target.attname for column in columns]
        self.converters = self.compiler.get_converters(columns)


# Per connection object: converters are bound to their connection, and each database thread has its own.
_readers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _locked_reader(model: type[Model], pk) -> _Reader:
    readers = _readers.setdefault(connections[DEFAULT_DB_ALIAS], {})
    if (reader := readers.get(model)) is None:
        reader = readers[model] = _Reader(model, pk)
    return reader


@functools.lru_cache(maxsize=64)
def _update_statement(model: type[Model], fields: tuple[str, ...], vendor: str) -> tuple[str, list]:
    quote = connection.ops.quote_name
    columns = [model._meta.get_field(name) for name in fields]
    assignments = ", ".join(f"{quote(field.column)} = %s" for field in columns)
    return f"UPDATE {quote(model._meta.db_table)} SET {assignments} WHERE {quote(model._meta.pk.column)} = %s", columns
