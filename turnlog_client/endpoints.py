"""The API's requests and answers without any I/O, so the blocking and the asyncio clients share them.

Each function returns a `Call` (method, path, query, JSON body, headers, the
success status); `answer` turns the response into its decoded JSON or the
error's exception (turnlog_client.errors).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote

from turnlog_client.errors import ApiError, error_for

API = "/api/v1"
NO_BODY = object()


@dataclasses.dataclass(frozen=True, slots=True)
class Call:
    method: str
    path: str
    params: dict[str, str] | None = None
    body: Any = NO_BODY
    headers: dict[str, str] | None = None
    ok: int = 200

    def content(self) -> bytes | None:
        if self.body is NO_BODY:
            return None
        return self.body.text if isinstance(self.body, Encoded) else encode(self.body)


@dataclasses.dataclass(frozen=True, slots=True)
class Encoded:
    """A body already encoded, sent byte for byte: a retried batch stays the very same request."""

    text: bytes


def encode(body: object) -> bytes:
    """Strict JSON: NaN and Infinity are refused here, as the server would refuse them (400 invalid_json)."""
    return json.dumps(body, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()


def answer(call: Call, status: int, content: bytes, retry_after: str | None) -> Any:
    """The decoded JSON of a success; raises the ApiError subclass of an error answer."""
    try:
        decoded = json.loads(content) if content else None
    except ValueError:
        decoded = None
    if status == call.ok and (decoded is not None or not content):
        return decoded
    text = content.decode(errors="replace")
    if status == call.ok:  # a success status without JSON: not a Turnlog server (a proxy's page, say)
        raise ApiError(status, None, text=f"not JSON: {text}")
    raise error_for(status, decoded, text=text, retry_after=retry_after)


def session_path(session_id: str, *rest: str) -> str:
    # Valid ids need no quoting; quoting keeps an invalid one inside its path segment (the server answers 404).
    return "/".join([f"{API}/sessions/{quote(session_id, safe='')}", *rest])


def query(**values: object) -> dict[str, str]:
    """Query parameters without the absent ones; booleans as the API spells them."""
    return {k: ("true" if v else "false") if isinstance(v, bool) else str(v) for k, v in values.items() if v is not None}


def create_session(
    session_id: str | None, agent_name: str | None, metadata: Mapping[str, Any] | None, project: str | None
) -> Call:
    body: dict[str, Any] = {k: v for k, v in {"id": session_id, "agent_name": agent_name, "project": project}.items() if v is not None}
    if metadata is not None:
        body["metadata"] = dict(metadata)
    return Call("POST", f"{API}/sessions", body=body, ok=201)


def get_session(session_id: str) -> Call:
    return Call("GET", session_path(session_id))


def list_sessions(**filters: object) -> Call:
    return Call("GET", f"{API}/sessions", params=query(**filters))


def append(session_id: str, events: Sequence[Mapping[str, Any]], expected_seq: int | None, idempotency_key: str | None) -> Call:
    body: dict[str, Any] = {"events": [dict(e) for e in events]}
    if expected_seq is not None:
        body["expected_seq"] = expected_seq
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
    return Call("POST", session_path(session_id, "events"), body=body, headers=headers, ok=201)


def append_encoded(session_id: str, events: Sequence[bytes], expected_seq: int | None, idempotency_key: str) -> Call:
    """`append` for events the writer encoded once (`encode(event)` each)."""
    seq = b"" if expected_seq is None else b',"expected_seq":%d' % expected_seq
    body = Encoded(b'{"events":[' + b",".join(events) + b"]" + seq + b"}")
    return Call("POST", session_path(session_id, "events"), body=body, headers={"Idempotency-Key": idempotency_key}, ok=201)


def events(session_id: str, since: int, limit: int | None) -> Call:
    return Call("GET", session_path(session_id, "events"), params=query(since=since, limit=limit))


def messages(session_id: str) -> Call:
    return Call("GET", session_path(session_id, "messages"))


def recovery_plan(session_id: str) -> Call:
    return Call("GET", session_path(session_id, "recovery-plan"))


def recover(session_id: str, digest: str | None, note: str | None, context: bool, abandon: bool) -> Call:
    body: dict[str, Any] = {"context": context, "abandon": abandon}
    body |= {k: v for k, v in {"digest": digest, "note": note}.items() if v is not None}
    return Call("POST", session_path(session_id, "recover"), body=body)


def dangling_calls(session_id: str) -> Call:
    return Call("GET", session_path(session_id, "dangling-calls"))


def patch_dangling_calls(session_id: str, digest: str | None, note: str | None) -> Call:
    body = {k: v for k, v in {"digest": digest, "note": note}.items() if v is not None}
    return Call("POST", session_path(session_id, "patch-dangling-calls"), body=body)


def fork(session_id: str, boundary: int | str, new_id: str | None) -> Call:
    body: dict[str, Any] = {"boundary": boundary}
    if new_id is not None:
        body["id"] = new_id
    return Call("POST", session_path(session_id, "fork"), body=body, ok=201)


def export(session_id: str) -> Call:
    return Call("GET", session_path(session_id, "export"))


def import_session(blob: Mapping[str, Any], session_id: str | None, project: str | None) -> Call:
    return Call("POST", f"{API}/sessions/import", params=query(id=session_id, project=project), body=dict(blob), ok=201)


def stream_url(base_url: str, session_id: str, after: int | None) -> str:
    """The websocket stream's URL: ws(s):// for http(s)://, `after` the last seq already seen."""
    scheme, _, rest = base_url.partition("://")
    ws = {"http": "ws", "https": "wss"}.get(scheme, scheme)
    path = f"/ws/v1/sessions/{quote(session_id, safe='')}/events"
    return f"{ws}://{rest}{path}" + ("" if after is None else f"?after={after}")
