"""The session list's view of the sessions: its filters and order read from the URL (so a view can be bookmarked),
and each row's usage, the same for a page load and for the live socket's rows (dashboard.live.session_list).

Every filter is a query parameter: `sort` (selectors.SORT_CHOICES), `model`, `tag` (`key` or `key:value` on the
session's metadata), `note_tag`, and a time range, `range` = hour, day or week, or `from` / `to` (UTC instants,
a date or a date and time). A value the page cannot read is a BadFilter, answered 400 on the styled page.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, time, timedelta
from urllib.parse import urlencode

from django.utils import timezone

from sessions_app import selectors
from sessions_app.log import pricing
from sessions_app.selectors import usage as usage_reads

RANGES = {"hour": timedelta(hours=1), "day": timedelta(days=1), "week": timedelta(days=7)}
RANGE_BETWEEN = "between"
RANGE_NAMES = (*RANGES, RANGE_BETWEEN)
# The columns whose header links sort the list, and what each sorts by first (the largest first, then back).
SORT_COLUMNS = (("duration", "Duration"), ("tokens", "Tokens"), ("cost", "Cost"))
SORTABLE = tuple(column for column, _ in SORT_COLUMNS)
TEXT_MAX = 200


class BadFilter(ValueError):
    """A filter value the list cannot apply: said to the person (the parameter and why), nothing listed."""

    def __init__(self, parameter: str, detail: str):
        super().__init__(detail)
        self.parameter = parameter


@dataclass(frozen=True)
class ListView:
    """The list's filters and order, as read from its URL; `params` writes them back (links, the socket)."""

    sort: str | None = None
    narrow: selectors.SessionFilter = field(default_factory=selectors.SessionFilter)
    range: str = ""
    start: str = ""
    end: str = ""

    def params(self, **changed) -> dict[str, str]:
        values = {
            "sort": self.sort or "", "model": self.narrow.model, "tag": self.narrow.tag, "note_tag": self.narrow.note_tag,
            "range": self.range, "from": self.start, "to": self.end,
        }  # fmt: skip
        values.update(changed)
        return {key: value for key, value in values.items() if value}

    @property
    def query(self) -> str:
        """The filters and order as a query string (without status, q, project: the page adds them)."""
        return urlencode(self.params())

    def sort_link(self, column: str) -> str:
        """The header link of a sortable column: largest first, then smallest first, then the default order."""
        following = {f"-{column}": column, column: ""}.get(self.sort or "", f"-{column}")
        return urlencode(self.params(sort=following))

    def sorted_by(self, column: str) -> str:
        """aria-sort of a column header."""
        if self.sort == f"-{column}":
            return "descending"
        return "ascending" if self.sort == column else "none"

    @property
    def sort_links(self) -> dict[str, str]:
        return {column: self.sort_link(column) for column in SORTABLE}

    @property
    def aria_sorts(self) -> dict[str, str]:
        return {column: self.sorted_by(column) for column in SORTABLE}

    @property
    def narrowed(self) -> bool:
        return bool(self.narrow.model or self.narrow.tag or self.narrow.note_tag or self.range)


def base_query(status: str | None, q: str, project) -> str:
    """The list's status, search and project as a query string, kept by its links beside the view's own."""
    return urlencode({"status": status or "", "q": q, "project": project.slug if project else ""})


def read_view(query, now: datetime | None = None) -> ListView:
    """The list view a page's or socket's query parameters (a dict or QueryDict) ask for; BadFilter naming what is wrong."""
    sort = query.get("sort", "")
    if sort and sort not in selectors.SORT_CHOICES:
        raise BadFilter("sort", f"sort {sort!r} is not one of {', '.join(selectors.SORT_CHOICES)}.")
    texts = {}
    for name in ("model", "tag", "note_tag"):
        value = query.get(name, "").strip()
        if len(value) > TEXT_MAX or "\x00" in value:
            raise BadFilter(name, f"{name} must be text of at most {TEXT_MAX} characters, without NUL.")
        texts[name] = value
    if texts["tag"].startswith(":"):
        raise BadFilter("tag", f"tag {texts['tag']!r} names no metadata key: write key or key:value.")
    chosen, start, end = query.get("range", ""), query.get("from", "").strip(), query.get("to", "").strip()
    if not chosen and (start or end):
        chosen = RANGE_BETWEEN
    if chosen and chosen not in RANGE_NAMES:
        raise BadFilter("range", f"range {chosen!r} is not one of {', '.join(RANGE_NAMES)}.")
    since = until = None
    if chosen in RANGES:
        since = (now or timezone.now()) - RANGES[chosen]
        start = end = ""  # the instants of a "between" the form still holds do not apply
    elif chosen == RANGE_BETWEEN:
        since, until = instant(start, "from", day_end=False), instant(end, "to", day_end=True)
        if since is None and until is None:
            raise BadFilter("range", "range between needs a from or a to instant.")
        if since and until and since > until:
            raise BadFilter("from", f"from {start} is after to {end}.")
    narrow = selectors.SessionFilter(**texts, since=since, until=until)
    return ListView(sort=sort or None, narrow=narrow, range=chosen, start=start, end=end)


def instant(text: str, name: str, *, day_end: bool) -> datetime | None:
    """A date (the whole day: from its start, to its end) or a date and time, in UTC unless it names its offset."""
    if not text:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise BadFilter(name, f"{name} {text!r} is not a date (2026-11-02) or a date and time (2026-11-02T14:30), UTC.") from None
    if len(text) == 10 and day_end:  # a date alone: its whole day
        moment = datetime.combine(moment.date(), time.max)
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def bill_rows(sessions) -> None:
    """Each session's usage as `session.bill`, for the rows: the totals kept on the session, the cost the list sorts
    by (priced again by the worker within a round of a price change), so a row's cost agrees with its place."""
    for session in sessions:
        session.bill = stored_bill(session)


def stored_bill(session) -> pricing.Bill:
    return pricing.Bill(
        input_tokens=session.input_tokens, output_tokens=session.output_tokens, cache_read_tokens=session.cache_read_tokens,
        cache_write_tokens=session.cache_write_tokens, reasoning_tokens=session.reasoning_tokens,
        models=tuple(session.models_used or ()), cost=session.cost, unpriced=tuple(session.unpriced or ()),
    )  # fmt: skip


MODELS_SEEN_SINCE = timedelta(days=30)


def models_seen(project_ids: list[int]) -> list[str]:
    """The models the projects' agents used lately, for the model filter's suggestions (any model can be typed)."""
    return usage_reads.models_used(project_ids, since=timezone.now() - MODELS_SEEN_SINCE)
