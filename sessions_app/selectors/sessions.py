"""Sessions: one by id, the list (filters, status, keyset cursors) and its open-turn labels."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.db.models import Case, CharField, Count, Exists, F, OuterRef, Q, TextField, Value, When
from django.db.models.functions import Cast
from django.db.models.fields.json import KeyTextTransform
from django.utils import timezone

from sessions_app.lib import cursors, statements
from sessions_app.lib.errors import SessionNotFound
from sessions_app.models import CallSighting, Event, Note, Session, UsageSum, open_turn_labels_of


@dataclass(frozen=True)
class SessionPage:
    items: list[Session]
    next_cursor: str | None


def get_session(session_id: str, *, related: bool = True) -> Session:
    """The session, with its parent and project unless not `related` (then they load when read):
    a read compiled once per connection, for the hot endpoints that need the row alone."""
    if not related:
        if (session := statements.get(Session, session_id)) is None:
            raise SessionNotFound(session_id)
        return session
    try:
        return Session.objects.select_related("parent", "project").get(pk=session_id)
    except Session.DoesNotExist:
        raise SessionNotFound(session_id) from None


def session_for_page(session_id: str) -> Session:
    """The session with its project (a page's header names it); Session.DoesNotExist when there is none."""
    return Session.objects.select_related("project").get(pk=session_id)


def session_with_forks_made(session_id: str) -> Session:
    """The session with `forks_made`, the number of its forks, read in the same query."""
    return Session.objects.annotate(forks_made=Count("forks")).get(pk=session_id)


def event_counts(session_ids: list[str]) -> dict[str, int]:
    """The event count of each of these sessions that exists (one indexed query)."""
    return dict(Session.objects.filter(pk__in=session_ids).values_list("id", "event_count"))


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


def sessions_by_status(now: datetime | None = None) -> list[tuple[str, str, int]]:
    """(project slug, status, sessions) of every project with sessions: one grouped query over the sessions'
    summary columns (status_filter's rule), never their events; for the metrics scrape."""
    now = now or timezone.now()
    status = Case(*(When(status_filter(s, now), then=Value(s)) for s in STATUSES), output_field=CharField())
    rows = Session.objects.order_by().annotate(status=status).values_list("project__slug", "status").annotate(n=Count("pk"))
    return sorted(rows)


# The orders the list can take beside its default (api.md): a name and its column; "-name" is descending.
SORTS = {"cost": "cost", "tokens": "tokens", "duration": "duration_ms"}
SORT_CHOICES = tuple(f"{sign}{name}" for name in SORTS for sign in ("", "-"))


@dataclass(frozen=True)
class SessionFilter:
    """What the session list narrows to beyond status and search: a model used, a metadata tag (`key` present, or
    `key:value`), a note's tag, and the sessions active within [since, until] (either end open)."""

    model: str = ""
    tag: str = ""
    note_tag: str = ""
    since: datetime | None = None
    until: datetime | None = None

    def apply(self, sessions, projects: list[int] | None):
        if any("\x00" in text for text in (self.model, self.tag, self.note_tag)):  # no stored text holds NUL
            return sessions.none()
        if self.model:
            sessions = sessions.filter(Exists(UsageSum.objects.filter(model=self.model, session_id=OuterRef("pk"))))
        if self.tag:
            key, has_value, value = self.tag.partition(":")
            if has_value:  # compared as text, so `n:5` finds {"n": 5} as well as {"n": "5"}, on both backends
                sessions = sessions.alias(tag_value=Cast(KeyTextTransform(key, "metadata"), TextField())).filter(tag_value=value)
            else:
                sessions = sessions.filter(metadata__has_key=key)
        if self.note_tag:
            sessions = sessions.filter(pk__in=sessions_with_note_tag(self.note_tag, projects))
        if self.since is not None:
            sessions = sessions.filter(last_activity_at__gte=self.since)
        if self.until is not None:
            sessions = sessions.filter(created_at__lte=self.until)
        return sessions


def sessions_with_note_tag(tag: str, projects: list[int] | None) -> list[str]:
    """Sessions with a note tagged `tag`: read as the calls page reads note tags (a JSON list, on both backends)."""
    notes = Note.objects.exclude(tags=[])
    if projects is not None:
        notes = notes.filter(session__project_id__in=projects)
    return sorted({sid for sid, tags in notes.values_list("session_id", "tags") if isinstance(tags, list) and tag in tags})


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
    sort: str | None = None,
    narrow: SessionFilter | None = None,
) -> SessionPage:
    """Sessions by newest activity first, or by `sort` (one of SORT_CHOICES, ties newest activity first),
    keyset-paginated on (activity, id), or (sorted column, activity, id).

    `q` matches the id, the agent name, or the name of a tool the session called.
    `projects` limits it to those projects' sessions (access.Actor.project_ids); None: all (commands).
    `labelled` fills the open-turn labels of the whole page in one query (for
    pages and tables that show them; the API and id lookups do not).
    """
    column = SORTS[sort.lstrip("-")] if sort else None
    if column:
        order = (f"-{column}" if sort.startswith("-") else column, "-last_activity_at", "-id")
    else:
        order = ("-last_activity_at", "-id")
    # The project is read apart (prefetched): joined, it led SQLite to scan by project and sort every row.
    sessions = Session.objects.prefetch_related("project").order_by(*order)
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
    if narrow is not None:
        sessions = narrow.apply(sessions, projects)
    if cursor and column:
        key, activity, last_id = decode_sorted_cursor(cursor, sort)
        after_tie = Q(last_activity_at__lt=activity) | Q(last_activity_at=activity, id__lt=last_id)
        # The bound on the column alone lets the index range-scan; the OR within it places the ties.
        if sort.startswith("-"):
            sessions = sessions.filter(Q(**{f"{column}__lte": key}) & (Q(**{f"{column}__lt": key}) | Q(**{column: key}) & after_tie))
        else:
            sessions = sessions.filter(Q(**{f"{column}__gte": key}) & (Q(**{f"{column}__gt": key}) | Q(**{column: key}) & after_tie))
    elif cursor:
        activity, last_id = decode_cursor(cursor)
        sessions = sessions.filter(Q(last_activity_at__lt=activity) | Q(last_activity_at=activity, id__lt=last_id))
    items = list(sessions[: limit + 1])
    has_more = len(items) > limit
    items = items[:limit]
    if labelled:
        label_open_turns(items)
    next_cursor = (encode_sorted_cursor(items[-1], sort) if column else encode_cursor(items[-1])) if has_more else None
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


def encode_sorted_cursor(session: Session, sort: str) -> str:
    name = sort.lstrip("-")
    key = format(session.cost, "f") if name == "cost" else getattr(session, SORTS[name])
    return cursors.encode_sorted(sort, key, session.last_activity_at, session.id)


def decode_sorted_cursor(cursor: str, sort: str) -> tuple[Decimal | int, datetime, str]:
    kind = str if sort.lstrip("-") == "cost" else int
    key, moment, session_id = cursors.decode_sorted(cursor, sort=sort, key_kind=kind, id_kind=str, given_by="this API returned")
    return (Decimal(key) if kind is str else key), moment, session_id
