"""The session list's search hits: what the log and notes say that matches the search box (sessions_app.selectors.search).

Each hit's snippet is escaped piece by piece and its highlights wrapped in
<mark>, so a `<script>` in content stays text whatever it matched.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.urls import reverse
from django.utils.html import escape, format_html, format_html_join

from sessions_app import services
from sessions_app.log import search_text
from sessions_app.selectors import search

HITS_PER_PAGE = 20


@dataclass(frozen=True)
class HitRow:
    hit: search.Hit
    url: str
    marked: str  # safe HTML: the escaped snippet with <mark>s


@dataclass(frozen=True)
class Hits:
    items: list[HitRow]
    next_cursor: str | None
    calls: list[HitRow] = field(default_factory=list)  # the calls the query names exactly (first page only)


def hits_for(q: str, projects: list[int], cursor: str | None = None) -> Hits | None:
    """The first page of hits (after `cursor`) of a query the box holds; None when it is nothing to search."""
    if not q.strip() or len(q) > search_text.QUERY_MAX:
        return None
    services.index_pending(projects=projects, wait=True)  # what was appended a moment ago is found
    page = search.search(q=q, projects=projects, limit=HITS_PER_PAGE, cursor=cursor)
    calls = search.reference_hits(q, projects) if cursor is None else []
    return Hits(
        items=[HitRow(hit, hit_url(hit), marked(hit.snippet, hit.highlights)) for hit in page.items], next_cursor=page.next_cursor,
        calls=[HitRow(hit, hit_url(hit), marked(hit.snippet, hit.highlights)) for hit in calls],
    )


def hit_url(hit: search.Hit) -> str:
    url = reverse("session_detail", args=[hit.session_id])
    return url if hit.seq is None else f"{url}#seq-{hit.seq}"


def marked(snippet: str, highlights: list[tuple[int, int]]) -> str:
    pieces = []
    at = 0
    for start, end in highlights:
        pieces.append(escape(snippet[at:start]))
        pieces.append(format_html("<mark>{}</mark>", snippet[start:end]))
        at = end
    pieces.append(escape(snippet[at:]))
    return format_html_join("", "{}", ((piece,) for piece in pieces))
