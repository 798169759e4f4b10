"""The recovery preview, live: it notices when the plan it shows is no longer the plan.

`RecoveryPageConsumer` (/ws/sessions/{id}/recovery/live?next_seq=K&digest=D&after=N)
follows the session and, after each run of new events, sends the `#plan-change`
banner: what changed since the page's plan (K, D) and the new plan one click away
(dashboard.pages.plan_change, which the page and a stale confirm render too).
"""

from __future__ import annotations

import functools

from dashboard.live import sessions as live_sessions
from dashboard.live.consumers import CLOSE_BAD_REQUEST, SessionEventsConsumer
from dashboard.pages.plan_change import DIGEST, render_plan_change_frame, shown_plan
from sessions_app.selectors import access


class RecoveryPageConsumer(live_sessions.RenewedSocket, SessionEventsConsumer):
    """The recovery preview's banner frames. The page's plan is `next_seq` and `digest` (4400 when
    either is missing or malformed); `after` is the browser's cursor, as on the session page."""

    async def connect(self):
        await self.accept()
        if await live_sessions.login_user(self) is None:
            return
        query = live_sessions.query_params(self.scope)
        self.shown_next_seq, self.shown_digest = shown_plan(query)
        if self.shown_next_seq is None or not DIGEST.fullmatch(self.shown_digest):
            return await self.close(code=CLOSE_BAD_REQUEST, reason="next_seq must be an integer >= 0 and digest a plan digest")
        await self.connect_stream(access.Actor(user=self.scope["user"]))
        self.renew_later()

    async def _send_events(self, wires: list[dict]) -> None:
        session_id, last_seq = self._stream.session_id, wires[-1]["seq"]
        render = functools.partial(render_plan_change_frame, session_id, self.shown_next_seq, self.shown_digest, last_seq)
        # Every viewer of the same plan in step with the log needs the same frame.
        key = ("recovery", session_id, self.shown_next_seq, self.shown_digest, last_seq)
        await self.send(text_data=await live_sessions.shared_frames.get(key, render))

    async def disconnect(self, code):
        self.cancel_renewal()
        await super().disconnect(code)
