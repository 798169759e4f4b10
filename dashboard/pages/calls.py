"""The fleet page (/calls/): the calls to check across the user's projects, for support staff.

`fleet_query` reads the page's filters from a query string; the page and its live
socket (dashboard/live/calls.py) both list with it and render `calls.html#call-row`,
so a live row is the row a reload shows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
import re
from datetime import UTC, datetime

from django.contrib.auth.decorators import login_required
from django.shortcuts import render
from django.utils import timezone

from dashboard.pages import refusals
from sessions_app import selectors
from sessions_app.log import events as log_events
from sessions_app.log.ledger import STATES
from sessions_app.selectors import access

ROWS_TARGETS = {"call-rows", "more-calls"}
PAGE_SIZE = 50
DEFAULT_STATES_WORDS = "tool_outcome_unknown, superseded, pending past the stall window"
# The "Settled" filter: its value in the query string -> fleet_calls' `settled` (to check: no current verdict).
SETTLED_CHOICES = {"": ("To check", False), "true": ("Settled", True), "any": ("Both", None)}
# What a date or datetime-local input sends: a date, or a date and time, with no zone (the page says it is UTC).
NAIVE_INSTANT = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}(T[0-9]{2}:[0-9]{2}(:[0-9]{2}(\.[0-9]{1,6})?)?)?", re.ASCII)


@dataclass
class FleetQuery:
    """The filters of one fleet listing, checked: what cannot be applied is dropped and said in `ignored`."""

    projects: list  # the Project rows the user may read
    project: object | None = None  # the one chosen, if any
    states: frozenset[str] | None = None  # None: the calls to check
    classes: frozenset[str] = frozenset()
    agent: str = ""
    tool: str = ""
    tag: str = ""
    since: datetime | None = None
    until: datetime | None = None
    settled: str = ""  # a key of SETTLED_CHOICES
    ignored: list[str] = field(default_factory=list)

    @property
    def with_verdict(self) -> bool | None:
        return SETTLED_CHOICES[self.settled][1]

    def listing(self, *, limit: int = PAGE_SIZE, cursor: str | None = None) -> selectors.FleetPage:
        return selectors.fleet_calls(
            projects=[self.project.pk] if self.project else [p.pk for p in self.projects],
            states=self.states, classes=self.classes, agent=self.agent, tool=self.tool, tag=self.tag,
            since=self.since, until=self.until, limit=limit, cursor=cursor, settled=self.with_verdict,
        )

    def context(self) -> dict:
        return {
            "projects": self.projects, "project": self.project, "chosen_states": sorted(self.states or ()), "chosen_classes": sorted(self.classes),
            "agent": self.agent, "tool": self.tool, "tag": self.tag, "since": _shown(self.since), "until": _shown(self.until),
            "states": STATES, "classes": selectors.CLASSES, "default_states": DEFAULT_STATES_WORDS, "ignored": self.ignored,
            "several_projects": len(self.projects) > 1 and self.project is None,
            "settled": self.settled, "settled_choices": [(value, words) for value, (words, _) in SETTLED_CHOICES.items()],
        }  # fmt: skip


def fleet_query(user, params) -> FleetQuery:
    """The filters in `params` (a QueryDict: state and class repeat) for `user`."""
    projects = list(access.projects(access.Actor(user=user)))
    query = FleetQuery(projects=projects)
    slug = params.get("project", "")
    query.project = next((p for p in projects if p.slug == slug), None)
    if slug and query.project is None:
        query.ignored.append(f"project {slug!r} is not a project of yours: every project is shown.")
    states = [s for s in params.getlist("state") if s]
    if unknown := [s for s in states if s not in STATES]:
        query.ignored.append(f"state {', '.join(map(repr, unknown))}: not one of {', '.join(STATES)}.")
    query.states = frozenset(s for s in states if s in STATES) or None
    classes = [c for c in params.getlist("class") if c]
    if unknown := [c for c in classes if c not in selectors.CLASSES]:
        query.ignored.append(f"class {', '.join(map(repr, unknown))}: not one of {', '.join(selectors.CLASSES)}.")
    query.classes = frozenset(c for c in classes if c in selectors.CLASSES)
    for name in ("agent", "tool", "tag"):
        value = params.get(name, "").strip()
        if "\x00" in value:
            query.ignored.append(f"{name}: NUL is not allowed.")
            value = ""
        setattr(query, name, value)
    settled = params.get("settled", "")
    if settled not in SETTLED_CHOICES:
        query.ignored.append(f"settled {settled!r}: not one of true, any (or empty: the calls to check).")
    query.settled = settled if settled in SETTLED_CHOICES else ""
    for name in ("since", "until"):
        if value := params.get(name, "").strip():
            try:
                setattr(query, name, read_instant(value))
            except ValueError:
                query.ignored.append(f"{name} {value!r}: not a date and time (UTC), nor an ISO 8601 time with a UTC offset or Z.")
    return query


def read_instant(value: str) -> datetime:
    """An instant from the page's date input (a datetime-local's value, or a date alone), read as UTC, or from
    an ISO 8601 time with its offset (as older links give it); ValueError otherwise."""
    if NAIVE_INSTANT.fullmatch(value):
        return datetime.fromisoformat(value).replace(tzinfo=UTC)
    return log_events.coerce_time(value)


def _shown(moment: datetime | None) -> str:
    """The value of a datetime-local input: the instant in UTC, to the second, without its zone."""
    return "" if moment is None else moment.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="seconds")


def without_cursor(params) -> str:
    """The query string of these filters, without a page's cursor (the live socket's and the next page's base)."""
    params = params.copy()
    params.pop("cursor", None)
    return params.urlencode()


@login_required
def fleet_page(request):
    seen_at = timezone.now()  # before the reads: the live socket catches up from here (dashboard/live/seen.py)
    query = fleet_query(request.user, request.GET)
    try:
        page = query.listing(cursor=request.GET.get("cursor") or None)
    except selectors.InvalidCursor as exc:
        return refusals.bad_request(request, parameter="cursor", detail=str(exc))
    context = {"page": page, "base_query": without_cursor(request.GET), "seen_at": seen_at, **query.context()}
    if request.htmx.target in ROWS_TARGETS:
        return render(request, "calls.html#rows", context)
    return render(request, "calls.html", context)
