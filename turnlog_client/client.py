"""`Client` (blocking, httpx) and `AsyncClient` (asyncio): one method per endpoint of docs/api.md.

Both send `Authorization: Bearer <token>`, return the decoded JSON (typed in
turnlog_client.types) and raise an exception of turnlog_client.errors for
every error answer, with the API's `error` code and `detail`. A request that
gets no answer raises TransportError. These methods never retry by
themselves: `Client.writer` does, with the same Idempotency-Key.
"""

from __future__ import annotations

import logging
import os
import re
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import httpx

from turnlog_client import endpoints
from turnlog_client.endpoints import Call
from turnlog_client.errors import SessionExists, TransportError, retryable
from turnlog_client.resume import chat_messages
from turnlog_client.stream import MAX_FRAME_BYTES, follow, follow_async
from turnlog_client.types import (
    AppendResult, Event, EventsPage, ImportResult, Message, NewEvent, Plan, RepairApplied, Session, SessionPage,
)  # fmt: skip

if TYPE_CHECKING:
    from turnlog_client.session import SessionWriter

logger = logging.getLogger("turnlog_client")
SESSION_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")  # docs/api.md, Conventions
DEFAULT_TIMEOUT = 30.0
PAGE = 5000  # the most events GET .../events returns at once


class _Base:
    def __init__(self, url: str, token: str, timeout: float):
        self.url = url.rstrip("/")
        self.headers = {"Authorization": f"Bearer {token}"}
        self.timeout = timeout

    def _request_args(self, call: Call) -> dict[str, Any]:
        content = call.content()
        headers = {**(call.headers or {}), **({"Content-Type": "application/json"} if content is not None else {})}
        return {"params": call.params, "content": content, "headers": headers}

    def _failed(self, call: Call, error: httpx.TransportError) -> TransportError:
        return TransportError(f"{call.method} {self.url}{call.path}: {type(error).__name__}: {error}")


class Client(_Base):
    """A blocking client of one Turnlog server. Safe to share between threads; close it (or use `with`).

    `transport` is handed to httpx (tests put a fault injector there).
    """

    def __init__(self, url: str, token: str, *, timeout: float = DEFAULT_TIMEOUT, transport: httpx.BaseTransport | None = None):
        super().__init__(url, token, timeout)
        self._http = httpx.Client(base_url=self.url, headers=self.headers, timeout=timeout, transport=transport)

    def send(self, call: Call) -> Any:
        try:
            response = self._http.request(call.method, call.path, **self._request_args(call))
        except httpx.TransportError as error:
            raise self._failed(call, error) from error
        return endpoints.answer(call, response.status_code, response.content, response.headers.get("Retry-After"))

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def create_session(
        self, session_id: str | None = None, *, agent_name: str | None = None, metadata: Mapping[str, Any] | None = None,
        project: str | None = None,
    ) -> Session:  # fmt: skip
        """A new session (201); SessionExists when the id is taken. The id is generated when absent."""
        return self.send(endpoints.create_session(session_id, agent_name, metadata, project))

    def get_session(self, session_id: str) -> Session:
        return self.send(endpoints.get_session(session_id))

    def list_sessions(self, **filters: object) -> SessionPage:
        """One page: filters `interrupted`, `status`, `q`, `project`, `limit`, `cursor` (docs/api.md)."""
        return self.send(endpoints.list_sessions(**filters))

    def iter_sessions(self, **filters: object) -> Iterator[Session]:
        """Every session the filters select, page after page."""
        cursor = filters.pop("cursor", None)
        while True:
            page = self.list_sessions(**filters, cursor=cursor)
            yield from page["items"]
            if not (cursor := page["next_cursor"]):
                return

    def append(
        self, session_id: str, events: Sequence[NewEvent | Mapping[str, Any]], *, expected_seq: int | None = None,
        idempotency_key: str | None = None,
    ) -> AppendResult:  # fmt: skip
        """Append a batch, all or nothing. With `idempotency_key`, sending it again stores nothing twice."""
        return self.send(endpoints.append(session_id, events, expected_seq, idempotency_key))

    def events(self, session_id: str, since: int = 0, *, limit: int | None = None) -> EventsPage:
        """One page of events with seq >= since (inclusive), oldest first."""
        return self.send(endpoints.events(session_id, since, limit))

    def iter_events(self, session_id: str, since: int = 0) -> Iterator[Event]:
        """Every event from `since` to the end of the log as it is now, paging as needed."""
        while events := self.events(session_id, since, limit=PAGE)["events"]:
            yield from events
            since = events[-1]["seq"] + 1

    def messages(self, session_id: str) -> list[Message]:
        """The fold: what the model sees."""
        return self.send(endpoints.messages(session_id))["messages"]

    def resume(self, session_id: str, *, strict: bool = True) -> list[dict[str, Any]]:
        """The fold as OpenAI chat messages, to continue the agent from its log (turnlog_client.resume).

        NotFound when there is no such session. With `strict` (the default),
        RecoveryNeeded while a turn is open (recover first: `recover(id, context=True)`)
        or when a call in the fold has no result (`patch_dangling_calls(id)`).
        """
        fold = self.messages(session_id)
        # Read after the fold: a turn that opened meanwhile refuses rather than resuming half of it.
        return chat_messages(session_id, fold, self.get_session(session_id)["open_turns"], strict=strict)

    def recovery_plan(self, session_id: str) -> Plan:
        return self.send(endpoints.recovery_plan(session_id))

    def recover(
        self, session_id: str, *, digest: str | None = None, note: str | None = None, context: bool = False, abandon: bool = False
    ) -> RepairApplied:
        """Apply the plan (the one with `digest`, else the current one); StalePlan carries the fresh plan."""
        return self.send(endpoints.recover(session_id, digest, note, context, abandon))

    def dangling_calls(self, session_id: str) -> dict[str, Any]:
        return self.send(endpoints.dangling_calls(session_id))

    def patch_dangling_calls(self, session_id: str, *, digest: str | None = None, note: str | None = None) -> RepairApplied:
        return self.send(endpoints.patch_dangling_calls(session_id, digest, note))

    def fork(self, session_id: str, *, boundary: int | str = "last", new_id: str | None = None) -> Session:
        return self.send(endpoints.fork(session_id, boundary, new_id))

    def export(self, session_id: str) -> dict[str, Any]:
        """The session as a version 2 blob (docs/session-log.md, section 8)."""
        return self.send(endpoints.export(session_id))

    def import_session(self, blob: Mapping[str, Any], *, session_id: str | None = None, project: str | None = None) -> ImportResult:
        return self.send(endpoints.import_session(blob, session_id, project))

    def stream(
        self, session_id: str, *, after: int | None = None, open_timeout: float = 10.0, max_frame_bytes: int | None = MAX_FRAME_BYTES
    ) -> Iterator[Event]:
        """The session's events with seq > `after` (all when None or -1), then each new one as it is committed.

        Resumes from the last seq after any close except the final refusals
        (4401, 4404: StreamClosed). It never ends by itself: break out of the
        loop, or close the generator. `max_frame_bytes` bounds one frame (one
        event's JSON; None: any size): the default, 128 MiB, holds any event a
        server with the default request limits accepts; a larger one ends the
        stream with StreamClosed(1009).
        """
        return follow(self.url, self.headers, session_id, after, open_timeout=open_timeout, max_frame_bytes=max_frame_bytes)

    def writer(
        self, session_id: str | None = None, *, agent_name: str | None = None, metadata: Mapping[str, Any] | None = None,
        project: str | None = None, spool: str | os.PathLike[str] | None = None, **options: Any,
    ) -> SessionWriter:  # fmt: skip
        """A SessionWriter for the session, creating it when it does not exist yet.

        `spool` (a file path) makes the writer durable: see turnlog_client.spool.
        A spool that still holds undelivered events (or the creation) of this
        session is resumed without asking the server anything. A spooled writer
        also starts while the server cannot be reached: it makes the session's
        id when none is given (32 hex digits, as the server would) and keeps
        the creation in the spool, to send first when the server is back.
        Without a spool, the writer needs the server to start. `options` go to
        Writer (batch_size, flush_interval, flush_timeout, backoff).
        """
        from turnlog_client.session import SessionWriter
        from turnlog_client.spool import Spool
        from turnlog_client.writer import Writer

        if spool is None:
            session_id, next_seq, turns = self._open_session(session_id, agent_name, metadata, project, spooled=False)
            return SessionWriter(Writer(self, session_id, next_seq=next_seq, **options), turns=turns)
        opened = Spool.open(spool, session_id)
        try:
            if opened.session_id is not None:  # what an earlier run left: its session, count and creation
                writer = Writer(self, opened.session_id, next_seq=opened.next_seq, create=opened.create, spool=opened, **options)
                return SessionWriter(writer, turns=None)
            # Ours from the start: a creation whose answer is lost and is sent again finds it, and makes no other.
            generated = session_id is None
            session_id = new_session_id() if session_id is None else session_id
            create: dict[str, Any] | None = None
            try:
                session_id, next_seq, turns = self._open_session(session_id, agent_name, metadata, project, spooled=True)
            except Exception as error:
                if not retryable(error):  # a refusal (401, 403, 422 ...) stays one
                    raise
                create = creation(session_id, agent_name, metadata, project)
                # An id no one else knows names an empty session; a given one may hold events: counted on delivery.
                next_seq = turns = 0 if generated else None
                logger.warning("turnlog: the server is away (%s); session %s starts in the spool %s", error, session_id, opened.path)
            opened.start(session_id, next_seq, create=create)
            return SessionWriter(Writer(self, session_id, next_seq=next_seq, create=create, spool=opened, **options), turns=turns)
        except BaseException:
            opened.close(remove=False)
            raise

    def _open_session(
        self, session_id: str | None, agent_name: str | None, metadata: Mapping[str, Any] | None, project: str | None,
        *, spooled: bool,
    ) -> tuple[str, int, int | None]:  # fmt: skip
        """Create the session, or read its count when it exists: (id, next_seq, turns; None: counted when needed)."""
        try:
            try:
                created = self.create_session(session_id, agent_name=agent_name, metadata=metadata, project=project)
                return created["id"], 0, 0
            except SessionExists:
                assert session_id is not None
                return session_id, self.get_session(session_id)["event_count"], None
        except Exception as error:
            if spooled or not retryable(error):
                raise
            hint = (
                "a writer without a spool needs the server to start; Client.writer(..., spool='agent.spool') starts "
                "without it, keeps the events in that file and sends them when the server is back"
            )  # fmt: skip
            if isinstance(error, TransportError):
                raise TransportError(f"{error}; {hint}") from error
            error.add_note(hint)
            raise


def new_session_id() -> str:
    """A session id as the server makes one when none is given: 32 lowercase hex digits (a random UUID's)."""
    return uuid.uuid4().hex


def creation(session_id: str, agent_name: str | None, metadata: Mapping[str, Any] | None, project: str | None) -> dict[str, Any]:
    """create_session's fields, to keep in a spool: refused here for what the server would refuse for certain."""
    if not SESSION_ID.fullmatch(session_id):
        raise ValueError(f"session id {session_id!r} must be 1 to 128 characters of A-Z a-z 0-9 . _ : -")
    fields = {"agent_name": agent_name, "metadata": None if metadata is None else dict(metadata), "project": project}
    endpoints.encode(fields)  # NaN, a lone surrogate, what is not JSON: ValueError or TypeError now, not a stuck spool
    return {name: value for name, value in fields.items() if value is not None}


class AsyncClient(_Base):
    """The asyncio client: the same methods as Client, awaited. Close it with `await client.aclose()`.

    It has no writer: the writer's batching thread and spool are blocking by
    design (a tool must wait until its call is recorded before it runs).
    """

    def __init__(self, url: str, token: str, *, timeout: float = DEFAULT_TIMEOUT, transport: httpx.AsyncBaseTransport | None = None):
        super().__init__(url, token, timeout)
        self._http = httpx.AsyncClient(base_url=self.url, headers=self.headers, timeout=timeout, transport=transport)

    async def send(self, call: Call) -> Any:
        try:
            response = await self._http.request(call.method, call.path, **self._request_args(call))
        except httpx.TransportError as error:
            raise self._failed(call, error) from error
        return endpoints.answer(call, response.status_code, response.content, response.headers.get("Retry-After"))

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def create_session(
        self, session_id: str | None = None, *, agent_name: str | None = None, metadata: Mapping[str, Any] | None = None,
        project: str | None = None,
    ) -> Session:  # fmt: skip
        return await self.send(endpoints.create_session(session_id, agent_name, metadata, project))

    async def get_session(self, session_id: str) -> Session:
        return await self.send(endpoints.get_session(session_id))

    async def list_sessions(self, **filters: object) -> SessionPage:
        return await self.send(endpoints.list_sessions(**filters))

    async def iter_sessions(self, **filters: object) -> AsyncIterator[Session]:
        cursor = filters.pop("cursor", None)
        while True:
            page = await self.list_sessions(**filters, cursor=cursor)
            for item in page["items"]:
                yield item
            if not (cursor := page["next_cursor"]):
                return

    async def append(
        self, session_id: str, events: Sequence[NewEvent | Mapping[str, Any]], *, expected_seq: int | None = None,
        idempotency_key: str | None = None,
    ) -> AppendResult:  # fmt: skip
        return await self.send(endpoints.append(session_id, events, expected_seq, idempotency_key))

    async def events(self, session_id: str, since: int = 0, *, limit: int | None = None) -> EventsPage:
        return await self.send(endpoints.events(session_id, since, limit))

    async def iter_events(self, session_id: str, since: int = 0) -> AsyncIterator[Event]:
        while events := (await self.events(session_id, since, limit=PAGE))["events"]:
            for event in events:
                yield event
            since = events[-1]["seq"] + 1

    async def messages(self, session_id: str) -> list[Message]:
        return (await self.send(endpoints.messages(session_id)))["messages"]

    async def resume(self, session_id: str, *, strict: bool = True) -> list[dict[str, Any]]:
        """As Client.resume."""
        fold = await self.messages(session_id)
        return chat_messages(session_id, fold, (await self.get_session(session_id))["open_turns"], strict=strict)

    async def recovery_plan(self, session_id: str) -> Plan:
        return await self.send(endpoints.recovery_plan(session_id))

    async def recover(
        self, session_id: str, *, digest: str | None = None, note: str | None = None, context: bool = False, abandon: bool = False
    ) -> RepairApplied:
        return await self.send(endpoints.recover(session_id, digest, note, context, abandon))

    async def dangling_calls(self, session_id: str) -> dict[str, Any]:
        return await self.send(endpoints.dangling_calls(session_id))

    async def patch_dangling_calls(self, session_id: str, *, digest: str | None = None, note: str | None = None) -> RepairApplied:
        return await self.send(endpoints.patch_dangling_calls(session_id, digest, note))

    async def fork(self, session_id: str, *, boundary: int | str = "last", new_id: str | None = None) -> Session:
        return await self.send(endpoints.fork(session_id, boundary, new_id))

    async def export(self, session_id: str) -> dict[str, Any]:
        return await self.send(endpoints.export(session_id))

    async def import_session(
        self, blob: Mapping[str, Any], *, session_id: str | None = None, project: str | None = None
    ) -> ImportResult:
        return await self.send(endpoints.import_session(blob, session_id, project))

    def stream(
        self, session_id: str, *, after: int | None = None, open_timeout: float = 10.0, max_frame_bytes: int | None = MAX_FRAME_BYTES
    ) -> AsyncIterator[Event]:
        """As Client.stream, for `async for`."""
        return follow_async(self.url, self.headers, session_id, after, open_timeout=open_timeout, max_frame_bytes=max_frame_bytes)
