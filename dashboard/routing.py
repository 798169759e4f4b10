from channels.generic.websocket import WebsocketConsumer
from django.urls import path, re_path

import sessions_app.api.converters  # noqa: F401  (registers the session_id converter)
from dashboard.live.calls import FleetCallsConsumer
from dashboard.live.consumers import CLOSE_NOT_FOUND, SessionEventsConsumer
from dashboard.live.metered import metered
from dashboard.live.recovery import RecoveryPageConsumer
from dashboard.live.session_list import SessionListConsumer
from dashboard.live.sessions import SessionPageConsumer


class NoSuchSession(WebsocketConsumer):
    """Any other socket path (an id outside the id alphabet, NUL or %2F included): closed 4404, as an unknown session."""

    def connect(self):
        self.accept()
        self.close(code=CLOSE_NOT_FOUND)


websocket_urlpatterns: list = [
    # Each counted by kind in the metrics (turnlog_websockets_open, turnlog_websocket_frames_sent_total).
    path("ws/v1/sessions/<session_id:session_id>/events", metered("api_events", SessionEventsConsumer.as_asgi())),
    # The browser pages' HTML streams (internal shape).
    path("ws/sessions/live", metered("session_list", SessionListConsumer.as_asgi())),
    path("ws/calls/live", metered("fleet_calls", FleetCallsConsumer.as_asgi())),
    path("ws/sessions/<session_id:session_id>/live", metered("session_page", SessionPageConsumer.as_asgi())),
    path("ws/sessions/<session_id:session_id>/recovery/live", metered("recovery_page", RecoveryPageConsumer.as_asgi())),
    re_path(r"^ws/", NoSuchSession.as_asgi()),
]
