"""Usage sums kept at append time (api.md, "Usage and cost"), and stored costs recomputed when prices change.

`track` runs inside `store_events`, so every write path (the API, OTLP, imports, the client) counts the
same way, in the append's transaction, from the rows it is inserting: no log is ever read again.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Sequence
from datetime import datetime
from decimal import Decimal

from django.db import connection, transaction

from sessions_app.lib import instruments, statements
from sessions_app.log import pricing
from sessions_app.log import usage as log_usage
from sessions_app.models import AgentModelHour, Project, Session, UsageSum
from sessions_app.selectors import usage as usage_reads

MODEL_MAX = UsageSum._meta.get_field("model").max_length
PROVIDER_MAX = UsageSum._meta.get_field("provider").max_length
KINDS = ("calls", "input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens")
# Session fields `track` may change (store_events saves them with the summary).
SESSION_FIELDS = (
    "input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens", "tokens",
    "models_used", "cost", "priced", "unpriced", "cost_basis",
)  # fmt: skip


ROWS_PER_STATEMENT = 1000


def hour_of(moment: datetime) -> datetime:
    return moment.replace(minute=0, second=0, microsecond=0)


def track(session: Session, rows: Sequence, *, received_at: datetime | None) -> list[str]:
    """Add the usage of the assistant messages among `rows` (StoredEvents being inserted) to the session's,
    its turns' and its agent's sums; the session fields it changed (the caller saves them)."""
    calls = [(row, found) for row in rows if row.type == "assistant_message" and (found := log_usage.of_message(row.data))]
    if not calls:
        return []
    version, pricer = usage_reads.pricer_at(session.project_id)
    # Sums as lists in KINDS' order (calls first): on every append with usage, so no Counter per call.
    per_turn: dict[tuple, list[int]] = {}
    per_agent: dict[tuple, list[int]] = {}
    totals = [0] * len(KINDS)
    models = list(session.models_used)
    unpriced = list(session.unpriced)
    cost = Decimal(0)
    # (model, priced) -> [calls, tokens of each kind...] and (model, priced) -> cost: counted in the metrics on commit.
    metered: dict[tuple[str, bool], list[int]] = {}
    metered_cost: dict[tuple[str, bool], float] = {}
    received_hour = None if received_at is None else hour_of(received_at)
    hours: dict[datetime, datetime] = {}  # a batch's events share a few hours: each floored once
    for row, found in calls:
        counts = (1, found.input_tokens, found.output_tokens, found.cache_read_tokens, found.cache_write_tokens, found.reasoning_tokens)
        # Names as long as their columns hold (PostgreSQL refuses longer ones; the price was found by the whole name).
        model, provider = (found.model or "")[:MODEL_MAX], (found.provider or "")[:PROVIDER_MAX]
        turn = row.turn_seq if row.turn_seq is not None else row.seq
        if (hour := hours.get(row.time)) is None:
            hour = hours[row.time] = hour_of(row.time)
        price = pricer.cost(found, hour)
        meter = (model, price is not None)
        for sums, key in ((per_turn, (turn, model, provider, hour)), (per_agent, (model, provider, received_hour or hour)), (metered, meter)):
            found_sums = sums.get(key)
            sums[key] = list(counts) if found_sums is None else list(map(operator.add, found_sums, counts))
        metered_cost[meter] = metered_cost.get(meter, 0.0) + float(price or 0)
        totals = list(map(operator.add, totals, counts))
        if model and model not in models:
            models.append(model)
        if price is None:
            if (model or pricing.NO_MODEL) not in unpriced:
                unpriced.append(model or pricing.NO_MODEL)
        else:
            cost += price
    changed = ["tokens", *log_usage.KINDS]
    for kind, added in zip(log_usage.KINDS, totals[1:]):
        setattr(session, kind, getattr(session, kind) + added)
    session.tokens = session.input_tokens + session.output_tokens
    # The other fields saved only when they change: JSON and decimals cost the most to send on every append.
    if models != session.models_used:
        session.models_used = models
        changed.append("models_used")
    if unpriced != session.unpriced:
        session.unpriced = unpriced
        session.priced = not unpriced
        changed += ["unpriced", "priced"]
    today = usage_reads.basis(version)
    if session.cost_basis in ("", today):
        # Priced at the same prices as before: add. Otherwise the worker prices the whole session again.
        if cost:
            session.cost = pricing.rounded(Decimal(session.cost) + cost)
            changed.append("cost")
        if session.cost_basis != today:
            session.cost_basis = today
            changed.append("cost_basis")
    _add(
        (UsageSum, ("session_id", "turn_seq", "model", "provider", "hour"), [(session.pk, *key, *sums) for key, sums in sorted(per_turn.items())]),
        (AgentModelHour, ("project_id", "agent_name", "model", "provider", "hour"),
         [(session.project_id, session.agent_name, *key, *sums) for key, sums in sorted(per_agent.items())]),
    )  # fmt: skip
    transaction.on_commit(lambda: instruments.count_usage({key: (m[0], m[1:], metered_cost[key]) for key, m in metered.items()}))
    return changed


def _add(*upserts: tuple[type, tuple[str, ...], list[tuple]]) -> None:
    """Upsert-add counts: each of `upserts` a model, its key's fields, and rows (the key's values, then KINDS'
    counts) in key order, so concurrent writers queue and never deadlock. On PostgreSQL all of them in one
    statement (one round trip on every append with usage, however many turns and models); on SQLite, in the
    process, one each."""
    adapt_time = statements.datetime_adapter()
    parts = []
    for model, key_columns, rows in upserts:
        at = key_columns.index("hour")
        # At most ROWS_PER_STATEMENT rows a statement: SQLite takes 32,766 parameters, PostgreSQL 65,535.
        for start in range(0, len(rows), ROWS_PER_STATEMENT):
            chunk = rows[start : start + ROWS_PER_STATEMENT]
            params = [value for row in chunk for value in (*row[:at], adapt_time(row[at]), *row[at + 1 :])]
            parts.append((_upsert_sql(model, key_columns, len(chunk), connection.vendor), params))
    if connection.vendor == "postgresql" and len(parts) > 1 and sum(len(params) for _, params in parts) <= 60000:
        *first, last = parts
        ctes = ", ".join(f"u{n} AS ({sql})" for n, (sql, _) in enumerate(first))
        statements.execute(f"WITH {ctes} {last[0]}", [value for _, params in parts for value in params])
        return
    for sql, params in parts:
        statements.execute(sql, params)


@functools.lru_cache(maxsize=256)
def _upsert_sql(model, key_columns: tuple[str, ...], rows: int, vendor: str) -> str:
    quote = connection.ops.quote_name
    table = quote(model._meta.db_table)
    columns = [model._meta.get_field(name.removesuffix("_id")).column if name.endswith("_id") else name for name in key_columns]
    additions = ", ".join(f"{quote(kind)} = {table}.{quote(kind)} + excluded.{quote(kind)}" for kind in KINDS)
    one = f"({', '.join(['%s'] * (len(columns) + len(KINDS)))})"
    return (
        f"INSERT INTO {table} ({', '.join(map(quote, [*columns, *KINDS]))}) VALUES {', '.join([one] * rows)}"
        f" ON CONFLICT ({', '.join(map(quote, columns))}) DO UPDATE SET {additions}"
    )


def copy_prefix(parent: Session, child: Session) -> None:
    """A fork's usage: its parent's sums below the seed length (a fork is cut outside every turn, so whole turns),
    and the child's totals from them, in the fork's transaction."""
    fields = ("turn_seq", "model", "provider", "hour", *KINDS)
    inherited = list(UsageSum.objects.filter(session_id=parent.pk, turn_seq__lt=child.seed_length).order_by("turn_seq", "hour").values(*fields))
    if not inherited:
        return
    UsageSum.objects.bulk_create(UsageSum(session_id=child.pk, **row) for row in inherited)
    _store_bill(child, inherited, models_used=parent.models_used)


def _store_bill(session: Session, rows: list[dict], *, models_used: list[str]) -> None:
    version = usage_reads.prices_version(session.project_id)
    bill = pricing.bill(((usage_reads.usage_of_row(row), row["hour"]) for row in rows), usage_reads.pricer_for(session.project_id))
    bill = usage_reads.in_first_use_order(bill, models_used)
    for kind in log_usage.KINDS:
        setattr(session, kind, getattr(bill, kind))
    session.tokens = bill.tokens
    session.models_used = list(bill.models)
    session.cost = bill.cost
    session.unpriced = list(bill.unpriced)
    session.priced = bill.priced
    session.cost_basis = usage_reads.basis(version)
    statements.save_fields(session, list(SESSION_FIELDS))


def stale_costs(project_id: int, version: int, *, limit: int) -> list[str]:
    """Up to `limit` of the project's sessions with tokens whose stored cost was priced at other prices than
    today's: a range below and one above today's basis in session_cost_basis_idx, so none stale reads no row."""
    today = usage_reads.basis(version)
    with_tokens = Session.objects.filter(project_id=project_id, tokens__gt=0).order_by()
    # Two ranges in a UNION: "!=" reads every session of the project on both backends, an OR does on SQLite.
    below = with_tokens.filter(cost_basis__lt=today).values_list("pk", flat=True)
    above = with_tokens.filter(cost_basis__gt=today).values_list("pk", flat=True)
    return list(below.union(above, all=True)[:limit])


def recompute_costs(*, limit: int = 500) -> int:
    """Price again, at today's prices, the stored cost of sessions priced before a price change (a project's
    own, or a new bundled price list); how many were recomputed, at most `limit` a round (the rest wait for the
    next). The worker runs it every round: with nothing stale it costs one indexed read per project."""
    done = 0
    fields = ("turn_seq", "model", "provider", "hour", *KINDS)
    for project_id, version in Project.objects.order_by("pk").values_list("pk", "prices_version"):
        for session_id in stale_costs(project_id, version, limit=limit - done):
            with transaction.atomic():
                session = statements.get_for_update(Session, session_id)
                if session is None:
                    continue
                rows = list(UsageSum.objects.filter(session_id=session_id).order_by("turn_seq", "hour").values(*fields))
                _store_bill(session, rows, models_used=session.models_used)
            done += 1
        if done >= limit:
            break
    return done
