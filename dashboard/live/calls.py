"""The fleet page's live rows (/ws/calls/live?<the page's filters>): new matching calls prepended, changed rows replaced,
rows a verdict took off the list (or, under the Settled filter, a withdrawal) dropped.

A call joins the list without an event of its own when its session stalls (its owed
calls then read as their risk), so the socket lists again on a timer, as the session
list re-checks running sessions, and soon after any session changes (session_changed).
Each row is `calls.html#call-row` with the inputs the page gives it.
"""

from __future__ import annotations

import asyncio
import contextlib

from channels.db import database_sync_to_async
from django.http import QueryDict
from django.template.loader import render_to_string

from dashboard import outage
from dashboard.live import seen
from dashboard.live import sessions as live_sessions
from dashboard.live.session_list import SessionListConsumer
from dashboard.outage import DATABASE_UNAVAILABLE
from dashboard.pages.calls import FleetQuery, fleet_query, without_cursor
from dashboard.templatetags.turnlog import dom_id
from sessions_app import selectors
from sessions_app.models import LedgerCall

prep_call_id = LedgerCall._meta.get_field("call_id").get_prep_value  # a stored call id (a long one is its digest)
# At most one listing per this many seconds while sessions keep changing.
CHANGE_SETTLE_SECONDS = 0.5


def row_key(row) -> tuple[str, str]:
    return (row.session.id, row.call.call_id)


class FleetCallsConsumer(SessionListConsumer):
    """The session list's socket (login, origin, renewal, access changes, the sessions group), listing calls."""

    query: FleetQuery

    def choose_projects(self, slug: str) -> None:
        params = QueryDict(self.scope.get("query_string", b"").decode("latin-1"))
        self.query = fleet_query(self.scope["user"], params)
        self.readable = [p.pk for p in self.query.projects]
        self._changed = asyncio.Event()

    def first_page_ids(self) -> dict:
        """The rows the page showed (rendered as it rendered them), by session and call id."""
        context = self.query.context()
        return {row_key(row): self.render(row, context) for row in self.query.listing().items}

    def render(self, row, context: dict, *, oob: str = "") -> str:
        return render_to_string("calls.html#call-row", {"row": row, "oob": oob, **context}).strip()

    def caught_up(self, seen_at) -> list[str]:
        """When anything the list shows changed since the page read its rows (dashboard/live/seen.py): the rows as a
        reload lists them, in the page's place (its "Older calls" pages too, as a reload would)."""
        if not selectors.changed_since(projects=self.readable, since=seen_at):
            return []
        context, page = self.query.context(), self.query.listing()
        self.shown = {row_key(row): self.render(row, context) for row in page.items}
        params = QueryDict(self.scope.get("query_string", b"").decode("latin-1"), mutable=True)
        params.pop(seen.PARAM, None)
        rows = render_to_string("calls.html#rows", {"page": page, "base_query": without_cursor(params), **context})
        return [f'<tbody id="call-rows" hx-swap-oob="innerHTML">{rows}</tbody>']

    async def session_changed(self, message):
        if self.shown is not None:
            self._changed.set()

    async def refresh_statuses(self):
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), live_sessions.STATUS_REFRESH_SECONDS)
            self._changed.clear()
            try:
                frames = await self._frames()
            except DATABASE_UNAVAILABLE as error:  # skip this round
                outage.database_outage.failed(error)
                continue
            for frame in frames:
                await self.send(text_data=frame)
            await asyncio.sleep(CHANGE_SETTLE_SECONDS)  # changes meanwhile wait for the next round

    async def _frames(self) -> list[str]:
        return await database_sync_to_async(self.changed_rows)()

    def deleted_rows(self) -> list[str]:
        """Removals of the shown rows whose session was deleted (sessions_app/services/retention)."""
        sessions = {session_id for session_id, _ in self.shown}
        gone = sessions - set(selectors.event_counts(list(sessions)))
        removed = [key for key in self.shown if key[0] in gone]
        for key in removed:
            del self.shown[key]
        return [f'<tr id="call-{dom_id(session_id)}--{dom_id(call_id)}" hx-swap-oob="delete"></tr>' for session_id, call_id in removed]

    def settled_rows(self, listed: set) -> list[str]:
        """Removals of the shown rows that left the list by a verdict recorded or withdrawn (the Settled filter's side)."""
        wanted = self.query.with_verdict
        if wanted is None:
            return []
        gone = [key for key in self.shown if key not in listed]
        settled = selectors.current_verdicts_of((sid, prep_call_id(cid)) for sid, cid in gone) if gone else {}
        removed = [key for key in gone if ((key[0], prep_call_id(key[1])) in settled) != wanted]
        for key in removed:
            del self.shown[key]
        return [f'<tr id="call-{dom_id(session_id)}--{dom_id(call_id)}" hx-swap-oob="delete"></tr>' for session_id, call_id in removed]

    def changed_rows(self) -> list[str]:
        context = self.query.context()
        added, frames = [], []
        items = self.query.listing().items
        for row in items:
            key, html = row_key(row), self.render(row, context)
            if key not in self.shown:
                added.append(html)
            elif self.shown[key] != html:
                frames.append(self.render(row, context, oob="true"))
            self.shown[key] = html
        frames += self.deleted_rows() + self.settled_rows({row_key(row) for row in items})
        if added:
            rows = "".join(added)
            frames.insert(0, f'<tbody hx-swap-oob="afterbegin:#call-rows">{rows}</tbody>')  # CSS hides "No call matches" then
        return frames
