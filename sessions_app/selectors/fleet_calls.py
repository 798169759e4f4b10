"""Calls across the fleet: the call ledger's rows, filtered and paged newest first (api.md, GET /api/v1/calls).

The state is decided where it can be without the session's status (the ledger's
`settled_state`) and otherwise here, from the session row's indexed status
columns by the same rule as selectors.sessions.status_filter: an owed call is
`pending` while its session runs, else the risk the plan gives it; a call sighted
outside every turn is `pending` while the session runs or is active. The
side-effect class is read through the tool policies as they are now.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db import connection
from django.db.models import Case, CharField, F, Q, Value, When
from django.utils import timezone

from sessions_app.lib import cursors
from sessions_app.log import calls as log_calls
from sessions_app.log import events as log_events
from sessions_app.log import ledger, recovery
from sessions_app.models import Event, LedgerCall, Note, ToolPolicy
from sessions_app.models.verdicts import OUTCOMES
from sessions_app.selectors.calls import CallRow
from sessions_app.selectors.policies import policies_by_project
from sessions_app.selectors.sessions import ACTIVE, RUNNING, stalled_before, status_filter
from sessions_app.selectors.verdicts import current_verdicts_of

CLASSES = (ToolPolicy.READ_ONLY, ToolPolicy.IDEMPOTENT, ToolPolicy.EXTERNAL_EFFECT, "unknown")
# The states the fleet lists by default, besides `pending` past the stall window: the calls to check.
CHECK_STATES = frozenset({recovery.TOOL_OUTCOME_UNKNOWN, ledger.SUPERSEDED})
prep_call_id = LedgerCall._meta.get_field("call_id").get_prep_value


@dataclass(frozen=True)
class FleetPage:
    items: list[CallRow]
    next_cursor: str | None


def _on_session(q: Q) -> Q:
    """A Session filter as a filter on the ledger row's session."""
    out = Q()
    out.connector, out.negated = q.connector, q.negated
    for child in q.children:
        if isinstance(child, Q):
            out.children.append(_on_session(child))
        else:
            lookup, value = child
            out.children.append((f"session__{lookup}", F(f"session__{value.name}") if isinstance(value, F) else value))
    return out


def state_expression(now: datetime) -> Case:
    """The call's state (log.ledger's rules) as SQL over the ledger row and its session's status columns."""
    running = _on_session(status_filter(RUNNING, now))
    active = _on_session(status_filter(ACTIVE, now))
    return Case(
        When(settled_state__isnull=False, then=F("settled_state")),
        When(Q(turn_seq__isnull=False) & running, then=Value(ledger.PENDING)),  # rule 5
        When(turn_seq__isnull=False, then=F("owed_risk")),
        When(running | active, then=Value(ledger.PENDING)),  # rule 6
        default=Value(ledger.NO_RESULT),
        output_field=CharField(),
    )


def fleet_calls(
    *,
    projects: list[int],
    states: frozenset[str] | None = None,
    classes: frozenset[str] = frozenset(),
    agent: str = "",
    tool: str = "",
    tag: str = "",
    ref: str = "",
    since: datetime | None = None,
    until: datetime | None = None,
    limit: int = 50,
    cursor: str | None = None,
    now: datetime | None = None,
    settled: bool | None = False,
) -> FleetPage:
    """The calls of `projects` newest first (by when the server first sighted them), keyset-paged.

    `states` None: the calls to check (tool_outcome_unknown, superseded, pending past the stall
    window). `classes` limits to tools the policies class so now; `tag` to calls with a note
    so tagged (on the call's first sighting or one of its results). `settled` False: the
    calls without a current verdict; True: those with one; None: both. selectors.InvalidCursor
    for a cursor this did not write. `ref`: only the calls whose receipt, idempotency key or current
    verdict's reference is exactly it, whatever their state unless `states` is given.
    """
    now = now or timezone.now()
    rows = LedgerCall.objects.all()
    if agent:
        rows = rows.filter(agent_name=agent)
    if tool:
        rows = rows.filter(tool=tool)
    if since is not None:
        rows = rows.filter(sighted_at__gte=since)
    if until is not None:
        rows = rows.filter(sighted_at__lt=until)
    if classes:
        rows = rows.filter(_of_classes(projects, classes))
    if tag:
        rows = rows.filter(_tagged(projects, tag))
    if cursor:
        moment, last_id = cursors.decode(cursor, id_kind=int, given_by="this API returned")
        rows = rows.filter(Q(sighted_at__lt=moment) | Q(sighted_at=moment, id__lt=last_id))
    if ref:
        found_keys = _referenced_keys(rows if settled is None else rows.filter(verdict__isnull=not settled), projects, ref, states, now, limit + 1)
    else:
        found_keys = _newest_keys(rows, projects, states, now, limit + 1, settled)
    keys = sorted(found_keys, reverse=True)[: limit + 1]
    by_id = LedgerCall.objects.annotate(state=state_expression(now)).select_related("session__project").in_bulk([pk for _, pk in keys])
    found = [by_id[pk] for _, pk in keys]
    page = found[:limit]
    next_cursor = cursors.encode(page[-1].sighted_at, page[-1].pk) if len(found) > limit else None
    return FleetPage(items=call_rows(page), next_cursor=next_cursor)


def _newest_keys(rows, projects: list[int], states: frozenset[str] | None, now: datetime, count: int, verdict: bool | None = False) -> list[tuple]:
    """The (sighted_at, id) of up to `count` newest rows per project, settled state and verdict asked for,
    and of the newest unsettled rows whose state (decided here) is asked for: each one indexed range
    (project, settled_state, verdict, newest first) cut by LIMIT, so the cost follows the page, not the
    project's calls. The caller merges them."""
    settled = (CHECK_STATES if states is None else states) - {ledger.PENDING}
    newest = ("-sighted_at", "-id")
    found: list[tuple] = []
    verdicts = [Q()] if verdict is None else [Q(verdict=o) for o in OUTCOMES] if verdict else [Q(verdict__isnull=True)]
    for project in dict.fromkeys(projects):  # a project named twice is read once
        mine = rows.filter(project_id=project)
        for state in sorted(settled):
            for of_verdict in verdicts:
                found += mine.filter(of_verdict, settled_state=state).order_by(*newest).values_list("sighted_at", "id")[:count]
        mine = mine.filter(verdict__isnull=not verdict) if verdict is not None else mine
        unsettled = mine.filter(settled_state__isnull=True).annotate(state=state_expression(now))
        found += unsettled.filter(_unsettled_in(states, now)).order_by(*newest).values_list("sighted_at", "id")[:count]
    return found


def _referenced_keys(rows, projects: list[int], ref: str, states: frozenset[str] | None, now: datetime, count: int) -> list[tuple]:
    """The (sighted_at, id) of up to `count` newest rows that name `ref`: each column's (project, column)
    index seeks the few rows holding it, every state unless `states` is given."""
    found: list[tuple] = []
    for project in dict.fromkeys(projects):
        for column in ("receipt", "idempotency_key", "verdict_ref"):
            named = rows.filter(project_id=project, **{column: ref})
            if states is not None:
                named = named.annotate(state=state_expression(now)).filter(state__in=states)
            found += named.order_by("-sighted_at", "-id").values_list("sighted_at", "id")[:count]
    return list(set(found))  # a call may name it twice (its key and its receipt)


def _unsettled_in(states: frozenset[str] | None, now: datetime) -> Q:
    """Unsettled rows whose state is one of `states` (None: the calls to check, pending past the stall window included)."""
    if states is None:
        return Q(state__in=CHECK_STATES) | Q(state=ledger.PENDING, sighted_at__lte=stalled_before(now))
    return Q(state__in=states)


def _of_classes(projects: list[int], classes: frozenset[str]) -> Q:
    """The tools the policies put in one of `classes` now, among the tools these projects' calls name."""
    found = Q(pk__in=[])
    for project, policies in policies_by_project(projects).items():
        names = [name for name in _tools_of([project]) if recovery.side_effect_class(name, policies) in classes]
        of_project = Q(tool__in=names) | Q(tool__isnull=True) if "unknown" in classes else Q(tool__in=names)
        found |= Q(project_id=project) & of_project
    return found


def _tools_of(projects: list[int]) -> set[str]:
    """The distinct tool names of the projects' calls, one index seek per name (a loose scan of
    ledger_project_tool_idx: a project's calls are many, its tools few)."""
    table = connection.ops.quote_name(LedgerCall._meta.db_table)
    sql = (
        f"WITH RECURSIVE names(tool) AS (SELECT MIN(tool) FROM {table} WHERE project_id = %s"
        f" UNION ALL SELECT (SELECT MIN(tool) FROM {table} WHERE project_id = %s AND tool > names.tool)"
        " FROM names WHERE names.tool IS NOT NULL) SELECT tool FROM names WHERE tool IS NOT NULL"
    )
    found: set[str] = set()
    with connection.cursor() as cursor:
        for project in set(projects):
            cursor.execute(sql, [project, project])
            found.update(name for (name,) in cursor.fetchall())
    return found


def _tagged(projects: list[int], tag: str) -> Q:
    """The calls a note tagged `tag` is pinned to: at their first sighting or at one of their results."""
    notes = Note.objects.filter(session__project_id__in=projects, seq__isnull=False).values_list("session_id", "seq", "tags")
    spots = {(sid, seq) for sid, seq, tags in notes if isinstance(tags, list) and tag in tags}
    if not spots:
        return Q(pk__in=[])
    at = Q()
    for sid, seq in spots:
        at |= Q(session_id=sid, seq=seq)
    results = Event.objects.filter(at, type="tool_result", call_id__isnull=False).values_list("session_id", "call_id")
    matched = at
    for sid, call_id in results:
        matched |= Q(session_id=sid, call_id=call_id)
    return matched


def call_rows(rows: list[LedgerCall]) -> list[CallRow]:
    """The rows as the API and pages show calls: name and arguments from the first sighting, class, notes."""
    if not rows:
        return []
    at = Q()
    for row in rows:
        at |= Q(session_id=row.session_id, seq=row.seq)
    sightings = {(sid, seq): (type_, data) for sid, seq, type_, data in Event.objects.filter(at).values_list("session_id", "seq", "type", "data")}
    sessions = {row.session_id for row in rows}
    results: dict[tuple[str, str], list[int]] = {}
    for sid, call_id, seq in Event.objects.filter(
        session_id__in=sessions, call_id__in={row.call_id for row in rows}, type="tool_result"
    ).values_list("session_id", "call_id", "seq"):
        results.setdefault((sid, call_id), []).append(seq)
    notes_at: dict[tuple[str, int], list[Note]] = {}
    for note in Note.objects.filter(session_id__in=sessions, seq__isnull=False).order_by("created_at", "id"):
        notes_at.setdefault((note.session_id, note.seq), []).append(note)
    policies = policies_by_project({row.project_id for row in rows})
    verdicts = current_verdicts_of((row.session_id, row.call_id) for row in rows if row.verdict)
    out = []
    for row in rows:
        call = _sighted_call(row, *sightings[(row.session_id, row.seq)])
        name = log_calls.call_name(call)
        seqs = dict.fromkeys([row.seq, *results.get((row.session_id, row.call_id), ())])
        notes = sorted((n for seq in seqs for n in notes_at.get((row.session_id, seq), ())), key=lambda n: (n.created_at, n.pk))
        state = ledger.CallState(
            log_events.call_id(call), name, log_calls.call_arguments(call), row.seq, row.turn_seq, row.state, row.result_seq
        )
        side_effect = recovery.side_effect_class(log_events.tool_name(name), policies[row.project_id])
        verdict = verdicts.get((row.session_id, row.call_id))
        out.append(CallRow(
            session=row.session, call=state, side_effect=side_effect, time=row.time, notes=notes, verdict=verdict,
            idempotency_key=row.idempotency_key, receipt=row.receipt,
        ))
    return out


def _sighted_call(row: LedgerCall, type_: str, data: dict) -> dict:
    """The call as its first-sighting event holds it (a tool_call event's data, or its entry in tool_calls)."""
    if type_ == "tool_call":
        return data
    for call in log_events.tool_calls_of(data):
        if (cid := log_events.call_id(call)) is not None and prep_call_id(cid) == row.call_id:
            return call
    return {}
