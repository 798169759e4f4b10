"""The session list's live rows (/ws/sessions/live?status=&q=&project=&<the view's filters>): changed rows replaced,
new matching sessions prepended, rows of deleted sessions removed, statuses that age with silence re-sent."""

from __future__ import annotations

import asyncio
import logging

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.template.loader import render_to_string
from django.utils import timezone

from dashboard import outage
from dashboard.live import credentials, seen
from dashboard.live import sessions as live_sessions
from dashboard.live.consumers import CLOSE_BAD_REQUEST, CLOSE_RENEW, CLOSE_UNAUTHENTICATED, close_without_database
from dashboard.live.sessions import RenewedSocket, login_user, query_params, stop_task
from dashboard.outage import DATABASE_UNAVAILABLE
from dashboard.pages import session_list as list_view
from dashboard.templatetags.turnlog import dom_id
from sessions_app import selectors, services
from sessions_app.selectors import access

logger = logging.getLogger(__name__)


class SessionListConsumer(RenewedSocket, credentials.CheckedSends, AsyncWebsocketConsumer):
    """Row updates for the session list: changed rows replaced, new matching sessions prepended."""

    _refresh: asyncio.Task | None = None
    _access: credentials.Registration | None = None
    _joined = False
    shown: set[str] | None = None

    async def connect(self):
        await self.accept()
        if await login_user(self) is None:
            return
        query = query_params(self.scope)
        status = query.get("status", "")
        self.status = status if status in selectors.STATUSES else None
        self.q = query.get("q", "").strip()
        self.projects = None
        try:  # the page's model, tag, time and order filters, read as the page reads them
            self.view = list_view.read_view(query)
            seen_at = seen.read(query)
        except (list_view.BadFilter, seen.BadSeenAt) as bad:
            return await self.close(code=CLOSE_BAD_REQUEST, reason=str(bad)[:120])
        joined_at = timezone.now()
        # Joined before the first read (a change during it is handled after connect() returns, as
        # messages are), and only once authenticated: a refused socket gets no updates.
        await self.channel_layer.group_add(services.SESSIONS_GROUP, self.channel_name)
        self._joined = True
        try:
            await database_sync_to_async(self.choose_projects)(query.get("project", ""))
            self.shown = await database_sync_to_async(self.first_page_ids)()
            self.statuses: dict[str, str] = {}
            caught_up = await database_sync_to_async(self.caught_up)(seen_at) if seen_at is not None else []
        except DATABASE_UNAVAILABLE as error:
            return await close_without_database(self, error)
        for frame in caught_up:
            await self.send(text_data=frame)
        if seen_at is not None:
            await self.send(text_data=seen.marker(joined_at))
        self._refresh = asyncio.create_task(self.refresh_statuses())
        self.credential = self._access = credentials.register(
            credentials.Registration(
                user_id=self.scope["user"].pk,
                token=None,
                projects=frozenset(self.readable),
                session_key=credentials.login_session_key(self.scope),
                close=self.close_for_access,
            )
        )
        self.renew_later()

    async def close_for_access(self, why: str) -> None:
        """The login ended or the user was deactivated (4401), or the projects they may read changed: renewed (4012), so
        the page reconnects and this list is rebuilt for the projects they may read now."""
        self._forget_access()
        await self.close(code=CLOSE_UNAUTHENTICATED if why == credentials.LOST_CREDENTIAL else CLOSE_RENEW)

    def choose_projects(self, slug: str) -> None:
        """The projects whose rows this list shows: the user's, or only the one named if it is theirs (as the page does)."""
        visible = list(access.projects(access.Actor(user=self.scope["user"])).values_list("pk", "slug"))
        self.readable = [pk for pk, _ in visible]
        chosen = [pk for pk, project_slug in visible if project_slug == slug]
        self.projects = chosen or [pk for pk, _ in visible]
        # The row partial shows a Project column while the list spans several projects, as on the page.
        self.row_context = {"projects": visible, "project": slug if chosen else None}

    def first_page_ids(self) -> set[str]:
        page = selectors.list_sessions(status=self.status, q=self.q, projects=self.projects, limit=50, sort=self.view.sort, narrow=self.view.narrow)
        return {s.id for s in page.items}

    def caught_up(self, seen_at) -> list[str]:
        """The rows of sessions created or appended to since the page read them (dashboard/live/seen.py), as the live
        frames would have sent them: in the newest-first list each goes to the top (turnlog.js drops the copy it
        replaces), in a sorted one a shown row is replaced in place; so are the rows changed with no event."""
        changed = selectors.sessions_active_since(projects=self.projects, since=seen_at)
        # Unsorted, every changed row goes to the top; sorted, only those the page may show are replaced.
        self.shown.difference_update(sid for sid, created_at in changed if not self.view.sort or created_at >= seen_at)
        frames = [frame for session_id, _ in changed if (frame := self.render_row(session_id))]
        # A row changed with no event (a verdict, a reconciler's attempt, recovery held for a person) stays where it is.
        active = {session_id for session_id, _ in changed}
        quiet = selectors.sessions_annotated_since(session_ids=sorted(self.shown - active), since=seen_at)
        frames += [frame for session_id in sorted(quiet) if (frame := self.render_row(session_id))]
        # A deleted session's row goes (the page may show it; this socket's first read no longer can).
        gone = [sid for sid in selectors.sessions_deleted_since(projects=self.projects, since=seen_at) if sid not in self.shown]
        return frames + [removed_row(session_id) for session_id in gone]

    async def session_changed(self, message):
        if self.shown is None:  # closed before its first read (4503): nothing to update
            return
        try:
            frame = await database_sync_to_async(self.render_row)(message["session_id"])
        except DATABASE_UNAVAILABLE as error:  # the row catches up with the session's next change
            outage.database_outage.failed(error)
            return
        if frame:
            await self.send(text_data=frame)

    def render_row(self, session_id: str) -> str | None:
        """The row's frame: new, changed, or (a session deleted) its removal; None when it no longer matches."""
        matches = selectors.list_sessions(
            status=self.status, q=self.q, projects=self.projects, limit=1, ids=[session_id], labelled=True, narrow=self.view.narrow
        ).items
        if not matches:
            if session_id in self.shown and not selectors.event_counts([session_id]):  # deleted (sessions_app/services/retention)
                self.shown.discard(session_id)
                self.statuses.pop(session_id, None)
                return removed_row(session_id)
            return None
        session = matches[0]
        selectors.mark_unknown_settled([session])  # as the page's rows read it
        list_view.bill_rows([session])
        self.statuses[session.id] = session.status
        if session.id in self.shown:
            return render_to_string("sessions/list.html#session-row", {"session": session, "oob": "true", **self.row_context}).strip()
        if self.view.sort:  # a sorted list has no top for new sessions: they show on the next load
            return None
        self.shown.add(session.id)
        row = render_to_string("sessions/list.html#session-row", {"session": session, **self.row_context}).strip()
        return f'<tbody hx-swap-oob="afterbegin:#session-rows">{row}</tbody>'

    async def refresh_statuses(self):
        """Statuses that change with silence alone (running -> stalled, active -> clean or recovered) are re-sent."""
        while True:
            await asyncio.sleep(live_sessions.STATUS_REFRESH_SECONDS)
            try:
                frames = await database_sync_to_async(self.changed_rows)()
            except DATABASE_UNAVAILABLE as error:  # skip this round
                outage.database_outage.failed(error)
                continue
            for frame in frames:
                await self.send(text_data=frame)

    def changed_rows(self) -> list[str]:
        ageing = [sid for sid, status in self.statuses.items() if status in (selectors.RUNNING, selectors.ACTIVE)]
        return [frame for sid in ageing if (frame := self.render_row(sid))]  # None: it no longer matches

    async def __call__(self, scope, receive, send):
        try:
            await super().__call__(scope, receive, send)
        finally:  # also when the server cancels the application without a disconnect
            self._forget_access()

    def _forget_access(self) -> None:
        registration, self._access = self._access, None
        if registration is not None:
            credentials.unregister(registration)

    async def disconnect(self, code):
        self.cancel_renewal()
        self._forget_access()
        await stop_task(self._refresh)
        if self._joined:
            self._joined = False
            try:
                await self.channel_layer.group_discard(services.SESSIONS_GROUP, self.channel_name)
            except Exception:  # the layer is down: the group entry expires on its own
                logger.warning("leaving group %s failed", services.SESSIONS_GROUP, exc_info=True)


def removed_row(session_id: str) -> str:
    return f'<tr id="session-{dom_id(session_id)}" hx-swap-oob="delete"></tr>'
