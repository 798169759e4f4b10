"""Turnlog's Python client: the HTTP API, the websocket stream, and a session writer that stores each event once.

It needs only httpx and websockets (no Django): `pip install ./turnlog_client`,
or with the server, which installs it too. See docs/guide/python-client.md.

- `Client(url, token)` / `AsyncClient`: one method per endpoint of docs/api.md;
  errors are exceptions of `turnlog_client.errors`.
- `Client.writer(session_id, ...)`: a `SessionWriter` (turns, steps, messages,
  tool calls) over a batching, retrying `Writer`, durable with `spool=PATH`
  (which also lets it start while the server is down).
- `Client.resume(session_id)`: the session's fold as OpenAI chat messages, to
  continue an agent after recovery (`turnlog_client.pydantic_ai.message_history`
  gives Pydantic AI's messages).
- `Client.stream(session_id, after=...)`: the session's events as they are
  committed, resumed after every close but 4401 and 4404.
"""

from turnlog_client.client import AsyncClient, Client
from turnlog_client.errors import (
    ApiError, Conflict, FlushTimeout, Forbidden, IdempotencyKeyReused, Invalid, InvalidEvent, NotFound, RateLimited,
    RecoveryNeeded, SeqConflict, ServerError, ServiceUnavailable, SessionExists, SpoolError, StalePlan, StreamClosed, TooLarge,
    TransportError, TurnlogError, Unauthenticated,
)  # fmt: skip
from turnlog_client.retry import Backoff
from turnlog_client.session import SessionWriter
from turnlog_client.writer import Writer

__version__ = "0.1.0"
__all__ = [
    "ApiError", "AsyncClient", "Backoff", "Client", "Conflict", "FlushTimeout", "Forbidden", "IdempotencyKeyReused",
    "Invalid", "InvalidEvent", "NotFound", "RateLimited", "RecoveryNeeded", "SeqConflict", "ServerError", "ServiceUnavailable",
    "SessionExists", "SessionWriter", "SpoolError", "StalePlan", "StreamClosed", "TooLarge", "TransportError",
    "TurnlogError", "Unauthenticated", "Writer",
]  # fmt: skip
