"""Reads: the queries views, the API and consumers use."""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass
from datetime import datetime, timedelta
from statistics import median

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db.models import Count, F, Max, Q, Sum
from django.utils import timezone

from sessions_app import cursors
from sessions_app.cursors import InvalidCursor  # noqa: F401  (callers catch selectors.InvalidCursor)
from sessions_app.log import events as log_events
from sessions_app.log import fold, fork, recovery, strategy
from sessions_app.models import (
    AgentHour,
    ApiToken,
    AuditEntry,
    CallSighting,
    Event,
    Membership,
    Project,
    RecoveryRecord,
    Session,
    ToolPolicy,
    open_turn_labels_of,
)
from sessions_app.errors import SessionNotFound


@dataclass(frozen=True)
class SessionPage:
    items: list[Session]
    next_cursor: str | None


def get_session(session_id: str) -> Session:
    try:
        return Session.objects.select_related("parent", "project").get(pk=session_id)
    except Session.DoesNotExist:
        raise SessionNotFound(session_id) from None


RUNNING, STALLED, ACTIVE, RECOVERED, CLEAN = "running", "stalled", "active", "recovered", "clean"
STATUSES = (RUNNING, STALLED, ACTIVE, RECOVERED, CLEAN)


def stalled_before(now: datetime | None = None) -> datetime:
    """An open turn with no event since this moment is likely a crash."""
    return (now or timezone.now()) - timedelta(seconds=settings.TURNLOG_STALL_SECONDS)


def status_filter(status: str, now: datetime | None = None) -> Q:
    """Session.status as a query: the same rule, so the list, its filter and the API agree."""
    cutoff = stalled_before(now)
    # An event received within the window that is not a recovery's own repair (recovered_at is set after them).
    recent = Q(last_received_at__gt=cutoff) & (Q(recovered_at__isnull=True) | Q(recovered_at__lt=F("last_received_at")))
    return {
        RUNNING: Q(interrupted=True, last_activity_at__gt=cutoff),
        STALLED: Q(interrupted=True, last_activity_at__lte=cutoff),
        ACTIVE: Q(interrupted=False) & recent,
        RECOVERED: Q(interrupted=False, recovered_at__isnull=False) & ~recent,
        CLEAN: Q(interrupted=False, recovered_at__isnull=True) & ~recent,
    }[status]


def list_sessions(
    *,
    interrupted: bool | None = None,
    status: str | None = None,
    q: str = "",
    ids: list[str] | None = None,
    projects: list[int] | None = None,
    limit: int = 50,
    cursor: str | None = None,
    labelled: bool = False,
) -> SessionPage:
    """Sessions by newest activity first, keyset-paginated on (activity, id).

    `q` matches the id, the agent name, or the name of a tool the session called.
    `projects` limits it to those projects' sessions (access.Actor.project_ids); None: all (commands).
    `labelled` fills the open-turn labels of the whole page in one query (for
    pages and tables that show them; the API and id lookups do not).
    """
    sessions = Session.objects.select_related("project").order_by("-last_activity_at", "-id")
    if interrupted is not None:
        sessions = sessions.filter(interrupted=interrupted)
    if status:
        sessions = sessions.filter(status_filter(status))
    if ids is not None:
        sessions = sessions.filter(pk__in=ids)
    if projects is not None:
        sessions = sessions.filter(project_id__in=projects)
    if "\x00" in q:  # no stored text holds NUL (log.values refuses it), and PostgreSQL cannot take it
        sessions = sessions.none()
    elif q:
        by_tool = CallSighting.objects.filter(tool_name__icontains=q).values("session_id")
        sessions = sessions.filter(Q(id__icontains=q) | Q(agent_name__icontains=q) | Q(pk__in=by_tool))
    if cursor:
        activity, last_id = decode_cursor(cursor)
        sessions = sessions.filter(Q(last_activity_at__lt=activity) | Q(last_activity_at=activity, id__lt=last_id))
    items = list(sessions[: limit + 1])
    has_more = len(items) > limit
    items = items[:limit]
    if labelled:
        label_open_turns(items)
    next_cursor = encode_cursor(items[-1]) if has_more else None
    return SessionPage(items=items, next_cursor=next_cursor)


def label_open_turns(sessions: list[Session]) -> None:
    """Fill each session's open_turn_labels with one query for the whole list."""
    interrupted = [s for s in sessions if s.turn_stack]
    if not interrupted:
        return
    pairs = Q()
    for s in interrupted:
        pairs |= Q(session_id=s.id, seq__in=s.turn_stack)
    starts = {(sid, seq): data for sid, seq, data in Event.objects.filter(pairs).values_list("session_id", "seq", "data")}
    for s in interrupted:
        s.open_turn_labels = open_turn_labels_of(s.open_turns, {seq: starts.get((s.id, seq)) for seq in s.turn_stack})


def encode_cursor(session: Session) -> str:
    return cursors.encode(session.last_activity_at, session.id)


def decode_cursor(cursor: str) -> tuple[datetime, str]:
    return cursors.decode(cursor, id_kind=str, given_by="this API returned")


def events_since(session: Session, *, since: int = 0, limit: int | None = None) -> list[log_events.Event]:
    """Stored events with seq >= since, oldest first (since is inclusive)."""
    if since < 0:
        raise ValueError(f"since must be 0 or more, got {since}")
    rows = Event.objects.filter(session=session, seq__gte=since).order_by("seq")
    return to_log_events(rows[:limit] if limit is not None else rows)


def session_log(session: Session) -> list[log_events.Event]:
    return events_since(session, since=0)


def session_messages(session: Session) -> list[dict]:
    return fold.project(session_log(session))


@dataclass(frozen=True)
class CallLookups:
    """What the log holds, anywhere, about some call ids: their tool_call and tool_result events
    (in seq order) and the seqs of the assistant messages that named them."""

    ids: frozenset[str]
    events: list[log_events.Event]
    sightings: dict[str, list[int]]  # call id -> seqs, ascending


def call_lookups(session: Session, ids: set[str]) -> CallLookups:
    """Two indexed lookups by call id, whatever the length of the log."""
    # Sorted here, not by the query: ORDER BY seq would lure SQLite's
    # planner onto the (session, seq) index and a scan of the whole log.
    events = sorted(to_log_events(Event.objects.filter(session=session, call_id__in=ids)), key=lambda e: e.seq)
    # Keyed by the ids themselves: the column holds a digest of an id too long for it.
    id_of_column = {CallSighting._meta.get_field("call_id").get_prep_value(cid): cid for cid in ids}
    sightings: dict[str, list[int]] = {}
    for stored, seq in sorted(CallSighting.objects.filter(session=session, call_id__in=ids).values_list("call_id", "seq"), key=lambda r: r[1]):
        sightings.setdefault(id_of_column.get(stored, stored), []).append(seq)
    return CallLookups(ids=frozenset(ids), events=events, sightings=sightings)


def recovery_plan(
    session: Session,
    *,
    tail: list[log_events.Event] | None = None,
    placement: dict[int, tuple[int | None, int | None]] | None = None,
    calls: CallLookups | None = None,
) -> recovery.Plan:
    """The session's recovery plan, reading only the events that can matter.

    Everything from the outermost open turn on, plus, before it: tool_call /
    tool_result events and assistant messages naming the same call ids
    (dispatch, result and first sighting are log-wide) and stray turn_ends
    (warnings); and the steps still open where the open turn began. Each is
    an indexed lookup, so the cost follows the open turn, not the log. The
    result equals sessions_app.log.recovery.plan over the whole log.

    A caller that has read every event from the outermost open turn on (a
    page's live frame, which holds the open turn) passes them as `tail`, with
    their `placement` (seq -> (turn_seq, step_seq), as placed_log_events
    reads it) and the `calls` it looked up (covering the tail's call ids),
    and saves the lookups they answer.
    """
    events = Event.objects.filter(session=session)
    if not session.turn_stack:
        return recovery.plan(to_log_events(events.filter(seq__in=session.stray_turn_ends).order_by("seq")))
    outermost = session.turn_stack[0]
    if tail is None or placement is None:
        tail = to_log_events(events.filter(seq__gte=outermost).order_by("seq"))
        step_stack = steps_open_at(session, outermost)
    else:  # steps_open_at, answered by the tail's step_ends
        closed_later = {placement[e.seq][1] for e in tail if e.type == "step_end"}
        step_stack = sorted(s for s in {*session.step_stack, *closed_later} if s is not None and s < outermost)
    # The calls the tail names (as its sightings and dispatches), which the rest of the log may answer.
    call_ids = {
        cid for e in tail if e.type == "assistant_message" for call in log_events.tool_calls_of(e.data) if (cid := log_events.call_id(call)) is not None
    }
    call_ids |= {log_events.call_id(e.data) for e in tail if e.type == "tool_call"} - {None}
    if calls is None or not call_ids <= calls.ids:
        calls = call_lookups(session, call_ids)
    known = {e.seq: e for e in calls.events if e.seq < outermost and log_events.call_id(e.data) in call_ids}
    sighted = {seq for cid in call_ids for seq in calls.sightings.get(cid, ()) if seq < outermost}
    unread = ({seq for seq in session.stray_turn_ends if seq < outermost} | sighted) - known.keys()
    earlier = to_log_events(events.filter(seq__in=unread)) if unread else []
    return recovery.plan(sorted([*known.values(), *earlier], key=lambda e: e.seq) + tail, step_stack=step_stack)


def complete_tail(session: Session, events: list[log_events.Event]) -> list[log_events.Event] | None:
    """The events from the outermost open turn on, when `events` (in seq order) hold every one of them."""
    if not session.turn_stack:
        return None
    tail = [e for e in events if e.seq >= session.turn_stack[0]]
    if len(tail) < session.event_count - session.turn_stack[0] or any(e.seq != session.turn_stack[0] + i for i, e in enumerate(tail)):
        return None
    return tail


def steps_open_at(session: Session, seq: int) -> list[int]:
    """The scan's step stack just before `seq`: steps opened earlier and not yet closed there.

    Each is either still open now (session.step_stack) or closed by a step_end
    at or after `seq` (whose step_seq names it); stacks push in seq order.
    """
    closed_later = Event.objects.filter(session=session, type="step_end", seq__gte=seq, step_seq__lt=seq)
    return sorted({s for s in session.step_stack if s < seq} | set(closed_later.values_list("step_seq", flat=True)))


def dangling_patch(session: Session) -> list[recovery.Repair]:
    """The turn-blind patch's repairs (reads the whole log: a rare, manual action)."""
    return recovery.patch_dangling_tool_calls(session_log(session))


def to_log_events(rows) -> list[log_events.Event]:
    return [
        log_events.Event(seq=r[0], type=r[1], time=r[2], data=r[3], received_at=r[4])
        for r in rows.values_list("seq", "type", "time", "data", "received_at")
    ]


def placed_log_events(rows) -> tuple[list[log_events.Event], dict[int, tuple[int | None, int | None]]]:
    """The rows as log events, and where each stands: seq -> (turn_seq, step_seq). One query."""
    events, placement = [], {}
    for seq, type_, time, data, received_at, turn_seq, step_seq in rows.values_list(
        "seq", "type", "time", "data", "received_at", "turn_seq", "step_seq"
    ):
        events.append(log_events.Event(seq=seq, type=type_, time=time, data=data, received_at=received_at))
        placement[seq] = (turn_seq, step_seq)
    return events, placement


def side_effect_classes(tool_names) -> dict[str | None, str]:
    """Each tool's side-effect class by ToolPolicy, keyed by log_events.tool_name of each name given."""
    policies = list(ToolPolicy.objects.values_list("pattern", "side_effect"))
    return {name: recovery.side_effect_class(name, policies) for name in {log_events.tool_name(n) for n in tool_names}}


def recovery_strategies(plan: recovery.Plan) -> list[strategy.TurnStrategy]:
    """The plan's strategies (section 8.1) under the tool policies as they are now."""
    classes = side_effect_classes(call.name for calls in plan.turn_calls.values() for call in calls)
    return strategy.strategies(plan, lambda name: classes[log_events.tool_name(name)])


def recovery_history(session: Session) -> list[RecoveryRecord]:
    return list(RecoveryRecord.objects.filter(session=session))  # the pages show the username column, not the user


@dataclass(frozen=True)
class ForkPoint:
    """A resolved, allowed fork boundary of a session."""

    seed_length: int
    step_stack: list[int]  # steps still open after the last inherited event


def fork_point(session: Session, boundary: object) -> ForkPoint:
    """Resolve `boundary` against the stored log; raise fork.ForkRefused as section 5 says.

    Uses the structural columns (which turn_end closed which turn_start), so
    the check does not read the events themselves.
    """
    seed_length = fork.resolve_boundary(boundary, session.event_count)
    unclosed = open_turn_starts_before(session, seed_length)
    if unclosed:
        innermost = unclosed[-1]
        refusal = fork.open_turn_refusal(seed_length - 1, innermost, turn_closed_at(session, innermost.seq))
        refusal.fields["valid_boundaries"] = valid_boundaries_around(session, unclosed[0].seq)
        raise refusal
    return ForkPoint(seed_length=seed_length, step_stack=steps_open_at(session, seed_length))


def open_turn_starts_before(session: Session, seq: int) -> list[log_events.Event]:
    """turn_start events before `seq` still open there, outermost first.

    As for steps (steps_open_at): still open now, or closed by a turn_end at
    or after `seq`; so the cost follows what comes after `seq`, not the log.
    """
    events = Event.objects.filter(session=session)
    closed_later = events.filter(type="turn_end", seq__gte=seq, turn_seq__lt=seq).values_list("turn_seq", flat=True)
    open_seqs = {t for t in session.turn_stack if t < seq} | set(closed_later)
    return to_log_events(events.filter(seq__in=open_seqs).order_by("seq")) if open_seqs else []


def valid_boundaries_around(session: Session, outermost_open: int) -> dict:
    """The nearest allowed boundaries around a turn open at a boundary.

    Before: the event just before the outermost open turn began (nothing is
    open there). After: the turn_end that closes that turn, if any.
    """
    return {"before": outermost_open - 1 if outermost_open > 0 else None, "after": turn_closed_at(session, outermost_open)}


def turn_closed_at(session: Session, turn_seq: int) -> int | None:
    """The seq of the turn_end that closed the turn opened at `turn_seq` (None: still open)."""
    closing = Event.objects.filter(session=session, type="turn_end", turn_seq=turn_seq)
    return closing.order_by("seq").values_list("seq", flat=True).first()


def unused_fork_id(parent: Session, seq: int) -> str:
    """A readable id, not taken yet, for a fork of `parent` ending at `seq`: "<parent>-fork-<seq>",
    then "-2", "-3"...; the parent's part is cut so that it fits the 128-character id rule."""
    suffix = f"-fork-{seq}" if seq >= 0 else "-fork"
    stem = parent.id[: 128 - len(suffix) - 8] + suffix  # room for "-<n>"
    taken = set(Session.objects.filter(id__startswith=stem).values_list("id", flat=True))
    return next(name for n in itertools.count(1) if (name := stem if n == 1 else f"{stem}-{n}") not in taken)


@dataclass(frozen=True)
class Lineage:
    ancestors: list[Session]  # root first, the immediate parent last
    descendants: list[tuple[Session, int]]  # depth-first, with depth (1 = a direct fork)


def lineage(session: Session) -> Lineage:
    """The chain of parents and the tree of forks around a session (one query per node)."""
    ancestors, current = [], session
    while current.parent_id is not None:
        current = Session.objects.get(pk=current.parent_id)
        ancestors.append(current)
    descendants: list[tuple[Session, int]] = []

    def visit(node: Session, depth: int) -> None:
        for child in Session.objects.filter(parent=node).order_by("created_at", "id"):
            descendants.append((child, depth))
            visit(child, depth + 1)

    visit(session, 1)
    return Lineage(ancestors=ancestors[::-1], descendants=descendants)


def session_counts(project_ids: list[int]) -> dict[int, int]:
    """project id -> how many sessions it holds (projects with none are absent)."""
    rows = Session.objects.filter(project_id__in=project_ids).values("project_id").annotate(n=Count("pk")).order_by()
    return {row["project_id"]: row["n"] for row in rows}


def project_members(project: Project) -> list[Membership]:
    return list(Membership.objects.filter(project=project).select_related("user").order_by("user__username"))


def project_member(project: Project, user_id: int) -> Membership | None:
    return Membership.objects.filter(project=project, user_id=user_id).select_related("user").first()


def user_named(username: str):
    """The account with this username, or None."""
    return get_user_model().objects.filter(username=username).first()


def project_token(project: Project, token_id: int) -> ApiToken | None:
    """One of the project's tokens (None for another project's: its admins manage only their own)."""
    return ApiToken.objects.filter(project=project, pk=token_id).select_related("user").first()


def project_tokens(project: Project) -> list[ApiToken]:
    """The project's tokens, newest first, revoked and expired ones included (the list shows their state)."""
    return list(ApiToken.objects.filter(project=project).select_related("user", "created_by").order_by("-created_at", "-id"))


def user_tokens(user) -> list[ApiToken]:
    """The user's own tokens in every project (site-level ones too), newest first, revoked and expired ones included."""
    return list(ApiToken.objects.filter(user=user).select_related("project", "created_by").order_by("-created_at", "-id"))


def user_token(user, token_id: int) -> ApiToken | None:
    """One of the user's own tokens (None for anyone else's: a person revokes only their own here)."""
    return ApiToken.objects.filter(user=user, pk=token_id).select_related("user", "project").first()


def user_named_alike(username: str):
    """An account whose username differs from this one by case only (or is it), or None."""
    return get_user_model().objects.filter(username__iexact=username).first()


@dataclass(frozen=True)
class AuditPage:
    items: list[AuditEntry]
    next_cursor: str | None


def newest_first_page(rows, *, before: str | None, limit: int) -> tuple[list, str | None]:
    """Rows newest first, keyset-paginated on (created_at, id); `before` is a cursor this gave."""
    if before:
        created, row_id = cursors.decode(before, id_kind=int, given_by="this page gave")
        rows = rows.filter(Q(created_at__lt=created) | Q(created_at=created, id__lt=row_id))
    items = list(rows.order_by("-created_at", "-id")[: limit + 1])
    if len(items) <= limit:
        return items, None
    last = items[limit - 1]
    return items[:limit], cursors.encode(last.created_at, last.pk)


def audit_entries(project: Project, *, action: str | None = None, before: str | None = None, limit: int = 50) -> AuditPage:
    """The project's audit entries, newest first, keyset-paginated on (time, id); `before` is a next_cursor."""
    entries = AuditEntry.objects.filter(project=project)
    if action:
        entries = entries.filter(action=action)
    items, cursor = newest_first_page(entries, before=before, limit=limit)
    return AuditPage(items=items, next_cursor=cursor)


def audit_targets(project: Project, entries: list[AuditEntry]) -> tuple[dict[str, int], dict[str, int]]:
    """What the entries' token and member targets are now, for links: (token pk by prefix, user id
    by username of the project's current members). A token or member gone is in neither."""
    prefixes = {e.target for e in entries if e.action in (AuditEntry.TOKEN_CREATED, AuditEntry.TOKEN_REVOKED)}
    names = {e.target for e in entries if e.action.startswith("member_")}
    tokens = dict(ApiToken.objects.filter(project=project, prefix__in=prefixes).values_list("prefix", "pk")) if prefixes else {}
    members = {}
    if names:
        rows = Membership.objects.filter(project=project, user__username__in=names).values_list("user__username", "user_id")
        members = dict(rows)
    return tokens, members


# Agents: failure history per agent name, read from the summaries kept at append and
# recovery time (AgentHour, RecoveryRecord), never from the logs.

AGENT_WINDOWS = {"day": timedelta(hours=24), "week": timedelta(days=7)}


@dataclass(frozen=True)
class AgentWindow:
    """One agent's counts over a window of hourly buckets."""

    sessions: int = 0
    turns: int = 0
    crashed_turns: int = 0

    @property
    def crash_rate(self) -> float | None:
        """Crashed turns / turns started (None without turns; may pass 1 when turns started before the window crash in it)."""
        return self.crashed_turns / self.turns if self.turns else None


@dataclass(frozen=True)
class AgentFailure:
    """An agent's latest failure: a session stalled now, or the newest recovery of open turns."""

    session_id: str
    at: datetime  # stalled: its last activity; recovered: when the recovery was applied
    stalled: bool
    quiet_seconds: float | None = None


@dataclass(frozen=True)
class AgentSummary:
    agent_name: str
    day: AgentWindow
    week: AgentWindow
    # Recoveries of open turns applied within the week:
    automatic: int = 0
    manual: int = 0
    stalled_median: float | None = None  # seconds quiet before recovery
    stalled_max: float | None = None
    strategies: tuple[tuple[str, int], ...] = ()  # (name, count), most seen first; "abandon" when a person abandoned
    stalled_now: int = 0
    last_failure: AgentFailure | None = None


def window_start(now: datetime, span: timedelta) -> datetime:
    """Windows are whole hourly buckets: the one holding `now - span` onwards."""
    return (now - span).replace(minute=0, second=0, microsecond=0)


def agent_summaries(project_ids: list[int], now: datetime | None = None, *, agent_name: str | None = None) -> list[AgentSummary]:
    """Each agent with activity in the last 7 days or a session stalled now, in these projects, by name.

    A constant number of queries whatever the number of events or agents:
    AgentHour sums, the week's recovery records, the stalled sessions, and
    each agent's newest recovery. `agent_name` narrows it to one agent.
    """
    now = now or timezone.now()
    day, week = (window_start(now, span) for span in AGENT_WINDOWS.values())
    named = {} if agent_name is None else {"agent_name": agent_name}
    hours = AgentHour.objects.filter(project_id__in=project_ids, hour__gte=week, hour__lte=now, **named)
    in_day = Q(hour__gte=day)
    sums = hours.values("agent_name").order_by().annotate(
        **{f"week_{n}": Sum(n) for n in ("sessions", "turns", "crashed_turns")},
        **{f"day_{n}": Sum(n, filter=in_day) for n in ("sessions", "turns", "crashed_turns")},
    )
    windows = {
        row["agent_name"]: tuple(
            AgentWindow(*(row[f"{w}_{n}"] or 0 for n in ("sessions", "turns", "crashed_turns"))) for w in ("day", "week")
        )
        for row in sums
    }
    recoveries = RecoveryRecord.objects.filter(kind=RecoveryRecord.RECOVERY, session__project_id__in=project_ids, **named)
    week_records: dict[str, list[tuple]] = {}
    for row in recoveries.filter(created_at__gte=week, created_at__lte=now).values_list(
        "agent_name", "automatic", "abandoned", "strategies", "quiet_seconds"
    ):
        week_records.setdefault(row[0], []).append(row[1:])
    stalled: dict[str, list[tuple[str, datetime]]] = {}
    stalled_rows = Session.objects.filter(project_id__in=project_ids, **named).filter(status_filter(STALLED, now))
    for name, session_id, activity, open_turns in stalled_rows.values_list(
        "agent_name", "id", "last_activity_at", "turn_stack"
    ).order_by("-last_activity_at", "-id"):
        stalled.setdefault(name, []).append((session_id, activity))
        # A stalled session's open turns have crashed already, though no recovery counted them yet.
        counts = windows.get(name, (AgentWindow(), AgentWindow()))
        windows[name] = tuple(
            dataclasses.replace(w, crashed_turns=w.crashed_turns + len(open_turns)) if activity >= start else w
            for w, start in zip(counts, (day, week), strict=True)
        )
    names = set(windows) | set(stalled)
    newest = {}
    if names:
        latest = recoveries.filter(agent_name__in=names).values("agent_name").order_by().annotate(at=Max("created_at"))
        pairs = Q()
        for row in latest:
            pairs |= Q(agent_name=row["agent_name"], created_at=row["at"])
        if latest:
            for name, session_id, at, quiet in recoveries.filter(pairs).order_by("created_at", "id").values_list(
                "agent_name", "session_id", "created_at", "quiet_seconds"
            ):
                newest[name] = AgentFailure(session_id=session_id, at=at, stalled=False, quiet_seconds=quiet)  # the last of a tie wins
    summaries = []
    for name in sorted(names, key=lambda n: (n.casefold(), n)):
        records = week_records.get(name, [])
        quiet = [q for *_, q in records if q is not None]
        seen: dict[str, int] = {}
        for _automatic, abandoned, strategies, _quiet in records:
            for entry in strategies or []:
                if isinstance(entry, dict) and isinstance(entry.get("strategy"), str):
                    seen[entry["strategy"]] = seen.get(entry["strategy"], 0) + 1
            if abandoned:
                seen["abandon"] = seen.get("abandon", 0) + 1
        now_stalled = stalled.get(name, [])
        if now_stalled:  # failing now: the most recently stalled session
            session_id, activity = now_stalled[0]
            last = AgentFailure(session_id=session_id, at=activity, stalled=True, quiet_seconds=(now - activity).total_seconds())
        else:
            last = newest.get(name)
        day_counts, week_counts = windows.get(name, (AgentWindow(), AgentWindow()))
        summaries.append(
            AgentSummary(
                agent_name=name,
                day=day_counts,
                week=week_counts,
                automatic=sum(1 for r in records if r[0]),
                manual=sum(1 for r in records if not r[0]),
                stalled_median=median(quiet) if quiet else None,
                stalled_max=max(quiet) if quiet else None,
                strategies=tuple(sorted(seen.items(), key=lambda item: (-item[1], item[0]))),
                stalled_now=len(now_stalled),
                last_failure=last,
            )
        )
    return summaries


def agent_exists(project_ids: list[int], agent_name: str) -> bool:
    """Whether any session of these projects has this agent name (session_agent_idx)."""
    return Session.objects.filter(project_id__in=project_ids, agent_name=agent_name).exists()


def agent_stalled_sessions(project_ids: list[int], agent_name: str, now: datetime | None = None, *, limit: int = 50) -> list[Session]:
    """The agent's sessions stalled now, most recently active first."""
    sessions = Session.objects.filter(project_id__in=project_ids, agent_name=agent_name).filter(status_filter(STALLED, now))
    return list(sessions.select_related("project").order_by("-last_activity_at", "-id")[:limit])


@dataclass(frozen=True)
class CrashPage:
    items: list[RecoveryRecord]
    next_cursor: str | None


def agent_crashes(project_ids: list[int], agent_name: str, *, before: str | None = None, limit: int = 50) -> CrashPage:
    """The agent's recovered crashes (recoveries of open turns), newest first, keyset-paginated on (time, id)."""
    records = RecoveryRecord.objects.filter(
        kind=RecoveryRecord.RECOVERY, agent_name=agent_name, session__project_id__in=project_ids
    ).select_related("session__project", "policy")
    items, cursor = newest_first_page(records, before=before, limit=limit)
    return CrashPage(items=items, next_cursor=cursor)
