"""Faults on the way to a real server: an httpx transport that forwards every request and, for appends, can lose
the answer after the server committed, refuse the connection, or answer as an overloaded proxy would."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx

# One action per append, in order (appends past the plan pass):
PASS = "pass"  # forwarded, answered
DROP = "drop"  # forwarded (the server commits), then the answer is lost: a read timeout
REFUSE = "refuse"  # never reaches the server: connection refused


def status(code: int, retry_after: int | None = None) -> tuple[int, dict[str, str]]:
    """Answered by the proxy, not forwarded: e.g. status(503, retry_after=1)."""
    return code, ({"Retry-After": str(retry_after)} if retry_after is not None else {})


class Faults(httpx.BaseTransport):
    def __init__(self, *plan: Any):
        self.inner = httpx.HTTPTransport()
        self.plan = list(plan)
        self.appends: list[tuple[str | None, bytes]] = []  # (Idempotency-Key, body) of every append attempt
        self.answers: list[int | str] = []  # what each attempt got: a status, or "lost"

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if not (request.method == "POST" and request.url.path.endswith("/events")):
            return self.inner.handle_request(request)
        request.read()
        self.appends.append((request.headers.get("Idempotency-Key"), request.content))
        action = self.plan.pop(0) if self.plan else PASS
        if action == REFUSE:
            self.answers.append("refused")
            raise httpx.ConnectError("injected: connection refused", request=request)
        if isinstance(action, tuple):
            code, headers = action
            self.answers.append(code)
            return httpx.Response(code, headers=headers, content=json.dumps({"detail": "injected by the test proxy"}).encode())
        if callable(action):
            action()  # something happens on the server before this request gets there
        response = self.inner.handle_request(request)
        response.read()
        if action == DROP:
            self.answers.append("lost")
            response.close()
            raise httpx.ReadTimeout("injected: the answer was lost after the server committed", request=request)
        self.answers.append(response.status_code)
        return response

    def close(self) -> None:
        self.inner.close()

    def keys(self) -> list[str | None]:
        return [key for key, _ in self.appends]

    def batches(self) -> list[list[dict]]:
        """The events of each distinct batch sent, in the order first sent."""
        seen: dict[str | None, list[dict]] = {}
        for key, body in self.appends:
            seen.setdefault(key, json.loads(body)["events"])
        return list(seen.values())


def foreign_append(url: str, token: str, session_id: str, content: str = "another writer") -> Callable[[], None]:
    """An action: another writer appends one event to the session."""

    def append() -> None:
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}) as other:
            answer = other.post(f"/api/v1/sessions/{session_id}/events", json={"events": [{"type": "user_message", "data": {"content": content}}]})
            assert answer.status_code == 201, answer.text

    return append
