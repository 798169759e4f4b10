"""Websockets counted for the metrics: connections open and frames sent, by kind (the route's stream).

One ASGI wrapper around each consumer in dashboard/routing.py, so no consumer carries counting code:
a connection is open from its connect until its application returns, and a frame is each
`websocket.send` it makes.
"""

from __future__ import annotations

from sessions_app.lib import instruments


def metered(kind: str, application):
    open_sockets = instruments.SOCKETS_OPEN.labels(kind)
    frames = instruments.FRAMES_SENT.labels(kind)

    async def counted(scope, receive, send):
        async def send_counted(message):
            if message["type"] == "websocket.send":
                frames.inc()
            await send(message)

        open_sockets.inc()
        try:
            return await application(scope, receive, send_counted)
        finally:
            open_sockets.dec()

    return counted
