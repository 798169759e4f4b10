"""Requests straight to an ASGI application, as Daphne hands them over (no server, no socket)."""

from __future__ import annotations

import pytest_asyncio
from asgiref.sync import sync_to_async
from asgiref.testing import ApplicationCommunicator


def http_scope(method: str, path: str, headers: dict[str, str], *, query: str = "", scheme: str = "http") -> dict:
    """An HTTP request's scope as Daphne hands it over (a Host of testserver unless `headers` say another)."""
    return {
        "type": "http",
        "http_version": "1.1",
        "method": method,
        "scheme": scheme,
        "path": path,
        "raw_path": path.encode(),
        "query_string": query.encode("latin1"),
        "server": ("testserver", 80),
        "client": ("127.0.0.1", 5000),
        "headers": [(k.lower().encode(), v.encode("latin1")) for k, v in {"Host": "testserver", **headers}.items()],
    }


async def response_of(communicator: ApplicationCommunicator, timeout: float = 10) -> tuple[int, dict[str, str], bytes]:
    """The status, headers (lower-case names) and whole body of the application's answer."""
    start = await communicator.receive_output(timeout)
    body = b""
    while True:
        message = await communicator.receive_output(timeout)
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    await communicator.wait(timeout)
    return start["status"], {k.decode().lower(): v.decode("latin1") for k, v in start["headers"]}, body


@pytest_asyncio.fixture
async def close_connections_of_the_sync_thread():
    """Requests sent straight to the application do their database work on asgiref's sync thread
    (TURNLOG_DB_THREADS = 0): its connection goes back before the test database is dropped.
    A test module uses it with `pytestmark = pytest.mark.usefixtures(...)` after importing it."""
    yield
    from django.db import connections

    await sync_to_async(connections.close_all)()
