"""Receipts re-read after a tool policy changes (api.md, "Verdicts, receipts and reconcilers").

Appends keep each call's receipt current with the policies as they are then
(services.ledger). A policy added, changed or deleted later leaves a ReceiptSweep
(`sweep_for_policy_change`); the worker works through it (`run_sweeps`): the ledger
rows of the tools its pattern matches, in id order, a batch per transaction, each
batch's receipts and the sweep's `after_id` committed together, so a worker killed
mid-way resumes after the last batch it committed. No log is read whole: one event
per call, its first real result, by (session, seq).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from django.conf import settings
from django.db import connection, transaction

from sessions_app.lib import statements
from sessions_app.log import policies as log_policies
from sessions_app.models import Event, LedgerCall, ReceiptSweep

from .ledger.facts import receipt_reader

PAIRS_PER_QUERY = 1000  # places per statement (a few sessions' IN lists, within SQLite's variable limit)


def sweep_for_policy_change(*, project_id: int | None, pattern: str) -> ReceiptSweep:
    """Ask the worker to re-read the receipts of the calls `pattern` may match (project None: every project's).

    Called when a policy with that pattern is saved or deleted; stored calls get the new receipt within a
    worker tick or a few (until then `?ref=` may miss them)."""
    return ReceiptSweep.objects.create(project_id=project_id, pattern=pattern)


# Sweep id -> the tool names its pattern matches, read once per sweep in this process (the worker runs a few
# batches a second; reading a large ledger's distinct names each time would cost more than the batches). A name
# first seen after that needs no sweep: its calls got their receipts under the changed policy as they arrived.
_TOOLS_OF: dict[int, list[str]] = {}


def run_sweeps(*, batches: int | None = None, batch_size: int | None = None) -> int:
    """Work through the pending sweeps, oldest first, for up to `batches` batches (None: until none is left);
    the number of calls read. Sweeps are re-read each batch, so one another worker finished is not repeated."""
    size = batch_size or settings.TURNLOG_RECEIPT_SWEEP_BATCH
    read = 0
    done_batches = 0
    tools_of = _TOOLS_OF
    while batches is None or done_batches < batches:
        sweep_id = ReceiptSweep.objects.order_by("id").values_list("id", flat=True).first()
        if sweep_id is None:
            break
        read += _batch(sweep_id, size, tools_of)
        done_batches += 1
    return read


def _batch(sweep_id: int, size: int, tools_of: dict[int, list[str]]) -> int:
    """One batch of one sweep in one transaction: receipts recomputed and after_id advanced together,
    or the sweep deleted when nothing is left."""
    with transaction.atomic():
        sweep = statements.get_for_update(ReceiptSweep, sweep_id)
        if sweep is None:  # another worker finished it
            return 0
        if sweep.pk not in tools_of:
            tools_of[sweep.pk] = _tools_matching(sweep.project_id, sweep.pattern)
        rows = LedgerCall.objects.filter(id__gt=sweep.after_id, tool__in=tools_of[sweep.pk])
        if sweep.project_id is not None:
            rows = rows.filter(project_id=sweep.project_id)
        columns = ("id", "session_id", "project_id", "tool", "real_seq", "receipt")
        batch = [_Row(*values) for values in rows.select_for_update().order_by("id").values_list(*columns)[:size]]
        if not batch:
            sweep.delete()
            tools_of.pop(sweep_id, None)
            return 0
        changed = recompute(batch)
        if changed:
            _write_receipts(changed)
        ReceiptSweep.objects.filter(pk=sweep.pk).update(after_id=batch[-1].pk)
        return len(batch)


WRITTEN_PER_STATEMENT = 1000


def _write_receipts(rows: list) -> None:
    """The rows' receipts in one UPDATE ... FROM (VALUES ...) per thousand (both databases have it): an
    UPDATE per row cost half a batch on PostgreSQL, bulk_update's CASE per row more on both."""
    quote = connection.ops.quote_name
    table = quote(LedgerCall._meta.db_table)
    with connection.cursor() as cursor:
        for start in range(0, len(rows), WRITTEN_PER_STATEMENT):
            chunk = rows[start : start + WRITTEN_PER_STATEMENT]
            values = ", ".join(["(%s, %s)"] * len(chunk))
            cursor.execute(
                f"UPDATE {table} SET {quote('receipt')} = v.column2 FROM (VALUES {values}) AS v"
                f" WHERE {table}.{quote('id')} = v.column1",
                [value for row in chunk for value in (row.pk, row.receipt)],
            )


def _tools_matching(project_id: int | None, pattern: str) -> list[str]:
    """The distinct tool names of the project's calls (every project's) that `pattern` matches."""
    names = LedgerCall.objects.filter(tool__isnull=False)
    if project_id is not None:
        names = names.filter(project_id=project_id)
    return sorted(name for name in names.values_list("tool", flat=True).distinct() if log_policies.matches(name, pattern))


@dataclass(slots=True)
class _Row:
    """The columns of a ledger row a sweep reads (model instances cost a third of a batch)."""

    pk: int
    session_id: str
    project_id: int
    tool: str | None
    real_seq: int | None
    receipt: str | None


def recompute(rows: Iterable) -> list:
    """Each row's receipt read again from its first real result with its project's policies as they are now;
    the rows whose receipt changed."""
    rows = list(rows)
    readers: dict[int, object] = {}
    results = _first_real_results([(row.session_id, row.real_seq) for row in rows if row.real_seq is not None])
    changed = []
    for row in rows:
        if row.project_id not in readers:
            readers[row.project_id] = receipt_reader(row.project_id)
        data = results.get((row.session_id, row.real_seq))
        receipt = readers[row.project_id](row.tool, data) if data is not None else None
        if receipt != row.receipt:
            row.receipt = receipt
            changed.append(row)
    return changed


def _first_real_results(pairs: list[tuple[str, int]]) -> dict[tuple[str, int], object]:
    """The data of the events at these (session, seq) places: per session, its seqs in one IN list, each
    statement's alternatives read off the (session, seq) key. Written as SQL: the ORM's building of a
    few hundred alternatives cost more than reading them."""
    by_session: dict[str, list[int]] = {}
    for session_id, seq in pairs:
        by_session.setdefault(session_id, []).append(seq)
    quote = connection.ops.quote_name
    table, data_field = quote(Event._meta.db_table), Event._meta.get_field("data")
    found: dict[tuple[str, int], object] = {}
    groups = list(by_session.items())
    start = 0
    while start < len(groups):
        where, params, size = [], [], 0
        while start < len(groups) and (size == 0 or size + len(groups[start][1]) <= PAIRS_PER_QUERY):
            session_id, seqs = groups[start]
            where.append(f"({quote('session_id')} = %s AND {quote('seq')} IN ({', '.join(['%s'] * len(seqs))}))")
            params += [session_id, *seqs]
            size += len(seqs)
            start += 1
        sql = f"SELECT {quote('session_id')}, {quote('seq')}, {quote('data')} FROM {table} WHERE {' OR '.join(where)}"
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            for session_id, seq, data in cursor.fetchall():
                found[(session_id, seq)] = data_field.from_db_value(data, None, connection)
    return found
