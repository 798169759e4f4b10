from django.urls import path

from dashboard.consumers import SessionEventsConsumer
from dashboard.live import SessionListConsumer, SessionPageConsumer

websocket_urlpatterns: list = [
    path("ws/v1/sessions/<str:session_id>/events", SessionEventsConsumer.as_asgi()),
    # The browser pages' HTML streams (internal shape).
    path("ws/sessions/live", SessionListConsumer.as_asgi()),
    path("ws/sessions/<str:session_id>/live", SessionPageConsumer.as_asgi()),
]
