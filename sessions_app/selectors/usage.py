"""Reads of usage and cost (api.md, "Usage and cost"): from the sums kept at append time, never a log.

Costs are priced here at today's prices (a project's own first), so a price change shows at once on
every page and in the API; the cost stored on `Session` for sorting follows within a worker round.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import datetime

from sessions_app.lib import statements
from sessions_app.log import pricing
from sessions_app.log.usage import Usage
from sessions_app.models import AgentModelHour, ModelPrice, Project, UsageSum

KINDS = ("calls", "input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens")

def prices_version(project_id: int) -> int:
    return Project.objects.filter(pk=project_id).values_list("prices_version", flat=True).first() or 0


def _version_of(project_id: int):
    return Project.objects.filter(pk=project_id).values_list("prices_version", "created_at")


# (project id, its creation, prices version) -> its pricer: a price change moves the version, and a project's
# creation tells a new one from a deleted one whose id SQLite gave again. Bounded: cleared past this many.
_PRICERS: dict[tuple, pricing.Pricer] = {}
PRICERS_KEPT = 256


def pricer_at(project_id: int) -> tuple[int, pricing.Pricer]:
    """The project's prices version and its pricer, for an append: one compiled read while its prices stay."""
    found = statements.rows("prices_version", _version_of, [project_id])
    if not found:
        return 0, pricer_for(project_id)
    version, created_at = found[0]
    key = (project_id, created_at, version)
    if (pricer := _PRICERS.get(key)) is None:
        if len(_PRICERS) >= PRICERS_KEPT:
            _PRICERS.clear()
        pricer = _PRICERS[key] = pricer_for(project_id)
    return version, pricer


def basis(version: int) -> str:
    """What a stored cost was computed with (Session.cost_basis)."""
    return f"{pricing.BUNDLED}; project prices v{version}"


def pricer_for(project_id: int) -> pricing.Pricer:
    """The project's pricer: its own prices (read now, so a change applies at once), then the bundled data."""
    return pricing.Pricer(price_of(row) for row in ModelPrice.objects.filter(project_id=project_id))


def price_of(row: ModelPrice) -> pricing.Price:
    return pricing.Price(
        model=row.model, provider=row.provider, valid_from=row.valid_from, input=row.input, output=row.output,
        cache_read=row.cache_read, cache_write=row.cache_write, reasoning=row.reasoning,
    )  # fmt: skip


def usage_of_row(row: dict) -> Usage:
    return Usage(
        input_tokens=row["input_tokens"], output_tokens=row["output_tokens"], cache_read_tokens=row["cache_read_tokens"],
        cache_write_tokens=row["cache_write_tokens"], reasoning_tokens=row["reasoning_tokens"],
        model=row["model"] or None, provider=row["provider"] or None,
    )  # fmt: skip


def _bill(rows: Iterable[dict], pricer: pricing.Pricer) -> pricing.Bill:
    return pricing.bill(((usage_of_row(row), row["hour"]) for row in rows), pricer)


def in_first_use_order(bill: pricing.Bill, models_used: Sequence[str]) -> pricing.Bill:
    """`bill` with its models (and unpriced ones) in the order the session first used them: the sums keep one row
    per turn, model and hour, which says nothing of which model came first inside a turn; `Session.models_used`,
    kept at append time, does. A name it lacks ("(no model)") keeps its place after those it has."""
    rank = {model: index for index, model in enumerate(models_used)}

    def ordered(names: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(sorted(names, key=lambda name: rank.get(name, len(rank))))

    return replace(bill, models=ordered(bill.models), unpriced=ordered(bill.unpriced))


def session_bills(sessions: Iterable) -> dict[str, pricing.Bill]:
    """Each session's usage, priced now: one query for all of them (a list's page), in order of first use."""
    sessions = list(sessions)
    rows: dict[str, list[dict]] = {s.pk: [] for s in sessions}
    fields = ("session_id", "turn_seq", "model", "provider", "hour", *KINDS)
    for row in UsageSum.objects.filter(session_id__in=list(rows)).order_by("session_id", "turn_seq", "hour").values(*fields):
        rows[row["session_id"]].append(row)
    pricers = {project_id: pricer_for(project_id) for project_id in {s.project_id for s in sessions}}
    return {s.pk: in_first_use_order(_bill(rows[s.pk], pricers[s.project_id]), s.models_used) for s in sessions}


def session_bill(session) -> pricing.Bill:
    return session_bills([session])[session.pk]


def turn_bills(session, turn_seqs: Iterable[int]) -> dict[int, pricing.Bill]:
    """The usage of each of these turns (by turn_start seq; a message outside every turn by its own seq)."""
    turn_seqs = list(turn_seqs)
    rows: dict[int, list[dict]] = {seq: [] for seq in turn_seqs}
    fields = ("turn_seq", "model", "provider", "hour", *KINDS)
    for row in UsageSum.objects.filter(session_id=session.pk, turn_seq__in=turn_seqs).order_by("turn_seq", "hour").values(*fields):
        rows[row["turn_seq"]].append(row)
    pricer = pricer_for(session.project_id)
    return {seq: in_first_use_order(_bill(found, pricer), session.models_used) for seq, found in rows.items()}


def bill_of_calls(project_id: int, calls: Iterable[tuple[Usage, datetime]]) -> pricing.Bill:
    """Usages read from events (a step's messages, a timeline bar), priced as the sums are."""
    return pricing.bill(calls, pricer_for(project_id))


def models_used(project_ids: Iterable[int], since: datetime) -> list[str]:
    """The models these projects' agents used since then (from the hourly sums, not the sessions), by name."""
    rows = AgentModelHour.objects.filter(project_id__in=list(project_ids), hour__gte=since).exclude(model="")
    return sorted(set(rows.values_list("model", flat=True).distinct()))
