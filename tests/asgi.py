"""Requests straight to an ASGI application, as Daphne hands them over (no server, no socket)."""

from __future__ import annotations

from asgiref.testing import ApplicationCommunicator


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
