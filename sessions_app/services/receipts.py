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

from django.conf import settings
from django.db import transaction
from django.db.models import Q

from sessions_app.lib import statements
from sessions_app.log import policies as log_policies
from sessions_app.models import Event, LedgerCall, ReceiptSweep

from .ledger.facts import receipt_reader

PAIRS_PER_QUERY = 250  # (session, seq) pairs per OR'd lookup: SQLite parses a long OR as a deep tree


def sweep_for_policy_change(*, project_id: int | None, pattern: str) -> ReceiptSweep:
    """Ask the worker to re-read the receipts of the calls `pattern` may match (project None: every project's).

    Called when a policy with that pattern is saved or deleted; stored calls get the new receipt within a
    worker tick or a few (until then `?ref=` may miss them)."""
    return ReceiptSweep.objects.create(project_id=project_id, pattern=pattern)


def run_sweeps(*, batches: int | None = None, batch_size: int | None = None) -> int:
    """Work through the pending sweeps, oldest first, for up to `batches` batches (None: until none is left);
    the number of calls read. Sweeps are re-read each batch, so one another worker finished is not repeated."""
    size = batch_size or settings.TURNLOG_RECEIPT_SWEEP_BATCH
    read = 0
    done_batches = 0
    tools_of: dict[int, list[str]] = {}  # sweep id -> the tool names its pattern matches (read once per run)
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
        batch = list(rows.select_for_update().order_by("id").only("id", "session_id", "project_id", "tool", "real_seq", "receipt")[:size])
        if not batch:
            sweep.delete()
            return 0
        changed = recompute(batch)
        if changed:
            LedgerCall.objects.bulk_update(changed, ["receipt"], batch_size=500)
        ReceiptSweep.objects.filter(pk=sweep.pk).update(after_id=batch[-1].pk)
        return len(batch)


def _tools_matching(project_id: int | None, pattern: str) -> list[str]:
    """The distinct tool names of the project's calls (every project's) that `pattern` matches."""
    names = LedgerCall.objects.filter(tool__isnull=False)
    if project_id is not None:
        names = names.filter(project_id=project_id)
    return sorted(name for name in names.values_list("tool", flat=True).distinct() if log_policies.matches(name, pattern))


def recompute(rows: Iterable[LedgerCall]) -> list[LedgerCall]:
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
    """The data of the events at these (session, seq) places."""
    found: dict[tuple[str, int], object] = {}
    for start in range(0, len(pairs), PAIRS_PER_QUERY):
        at = Q()
        for session_id, seq in pairs[start : start + PAIRS_PER_QUERY]:
            at |= Q(session_id=session_id, seq=seq)
        for session_id, seq, data in Event.objects.filter(at).values_list("session_id", "seq", "data"):
            found[(session_id, seq)] = data
    return found
