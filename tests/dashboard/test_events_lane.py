"""dashboard.lanes.EventsLane: bearer-token reads of a session's events past Django's handler, answered as Django answers them.

Every request is sent through the lane (the server's whole ASGI application)
and straight to Django's handler: the status, headers, body and audit
entries must be the same, for the pages the lane serves and for everything
it leaves to Django.
"""

from __future__ import annotations

import json
import re

import pytest
from asgiref.sync import sync_to_async
from asgiref.testing import ApplicationCommunicator
from django.core.asgi import get_asgi_application
from django.db import OperationalError

from dashboard import lanes
from dashboard.asgi import application, django_asgi_app
from sessions_app import selectors, services
from sessions_app.log.events import validate_batch
from sessions_app.models import ApiToken, AuditEntry
from sessions_app.selectors import access
from tests.access import case_tokens
from tests.asgi import close_connections_of_the_sync_thread, http_scope, response_of  # noqa: F401 (the fixture)

pytestmark = [pytest.mark.asyncio, pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("close_connections_of_the_sync_thread")]

AT = "2025-01-01T00:00:00Z"
SESSION = "read-me"


async def get(app, path: str, query: str = "", headers: dict[str, str] | None = None, *, scheme: str = "http") -> tuple[int, dict, bytes]:
    scope = http_scope("GET", path, headers or {}, query=query, scheme=scheme)
    communicator = ApplicationCommunicator(app, scope)
    await communicator.send_input({"type": "http.request", "body": b"", "more_body": False})
    return await response_of(communicator)


@pytest.fixture
def world(django_user_model):
    """Tokens for the cases, and a session of the default project with events (one past 64 bits)."""

    def build():
        tokens = case_tokens(django_user_model, scoped="append_only", scopes=["append"])
        services.create_session(session_id=SESSION, agent_name="a")
        events = [
            {"type": "user_message", "data": {"content": "<b>first</b> é"}, "time": AT},
            {"type": "turn_start", "data": {}, "time": AT},
            {"type": "user_message", "data": {"content": "big", "metadata": {"n": 2**70, "f": 0.1}}, "time": AT},
        ]
        services.append_events(session_id=SESSION, events=validate_batch(events))
        return tokens

    return sync_to_async(build)


CASES = {
    # name: (token, query, extra headers)
    "default_page": ("member", "", {}),
    "since": ("member", "since=1", {}),
    "limit": ("member", "limit=1", {}),
    "since_and_limit": ("member", "since=1&limit=1", {}),
    "past_the_end": ("member", "since=99", {}),
    "largest_limit": ("member", "limit=5000", {}),
    "viewer": ("viewer", "", {}),
    "lowercase_bearer": ("member", "", {}),
    # Left to Django:
    "negative_since": ("member", "since=-1", {}),
    "limit_zero": ("member", "limit=0", {}),
    "limit_too_large": ("member", "limit=5001", {}),
    "plus_sign": ("member", "since=+1", {}),
    "leading_zero": ("member", "since=01", {}),
    "empty_value": ("member", "since=", {}),
    "not_a_number": ("member", "since=x", {}),
    "twice": ("member", "since=1&since=2", {}),
    "another_key": ("member", "since=1&other=2", {}),
    "huge_since": ("member", "since=" + "9" * 30, {}),
    "nul": ("member", "since=%00", {}),
    "no_token": (None, "", {}),
    "unknown_token": ("tl_nope", "", {}),
    "revoked_token": ("revoked", "", {}),
    "append_scope_only": ("append_only", "", {}),
    "other_project": ("other_project", "", {}),
    "disallowed_host": ("member", "", {"Host": "evil.example"}),
    "disallowed_user_agent": ("member", "", {"User-Agent": "BadBot/1.0"}),
}
# Pages the lane serves itself (Django may also answer 200 to some it leaves to it: `since=+1`).
SERVED = {"default_page", "since", "limit", "since_and_limit", "past_the_end", "largest_limit", "viewer", "lowercase_bearer"}


def headers_of(name: str, tokens: dict) -> dict:
    token, _, extra = CASES[name]
    secret = tokens.get(token, token)
    scheme = "bearer" if name == "lowercase_bearer" else "Bearer"
    return {**({"Authorization": f"{scheme} {secret}"} if secret else {}), **extra}


def audited() -> list[tuple]:
    return sorted((a.action, a.actor_name, a.detail.get("capability")) for a in AuditEntry.objects.filter(target__in=[SESSION, "missing"]))


@pytest.mark.parametrize("name", list(CASES))
async def test_the_lane_answers_and_audits_as_django_does(name, world, settings, monkeypatch):
    monkeypatch.setattr(access, "DENIAL_RECORD_SECONDS", 0)  # every refusal recorded: one more would show
    settings.ALLOWED_HOSTS = ["testserver"]
    settings.DISALLOWED_USER_AGENTS = [re.compile("^BadBot")]
    tokens = await world()
    _, query, _ = CASES[name]
    answers, audits = {}, {}
    for app in (application, django_asgi_app):
        before = await sync_to_async(audited)()
        answers[app] = [await get(app, f"/api/v1/sessions/{sid}/events", query, headers_of(name, tokens)) for sid in (SESSION, "missing")]
        audits[app] = [entry for entry in await sync_to_async(audited)() if entry not in before or before.remove(entry)]
    assert answers[application] == answers[django_asgi_app]
    assert audits[application] == audits[django_asgi_app]
    if name in SERVED:
        assert answers[application][0][0] == 200
    if name == "default_page":
        page = json.loads(answers[application][0][2])
        assert page["next_seq"] == 3 and page["events"][2]["data"]["metadata"] == {"n": 2**70, "f": 0.1}
        assert page["events"][0]["data"]["content"] == "<b>first</b> é"


@pytest.mark.parametrize("name", sorted(SERVED))
async def test_the_pages_it_serves_are_answered_by_the_lane_alone(name, world):
    tokens = await world()

    async def django_must_not_answer(scope, receive, send):
        raise AssertionError("Django was asked")

    _, query, _ = CASES[name]
    status, _, content = await get(lanes.EventsLane(django_must_not_answer), f"/api/v1/sessions/{SESSION}/events", query, headers_of(name, tokens))
    assert status == 200 and json.loads(content)["next_seq"] == 3


async def test_a_readable_page_is_answered_by_the_lane_alone_and_records_the_tokens_use(world):
    tokens = await world()

    async def django_must_not_answer(scope, receive, send):
        raise AssertionError("Django was asked")

    await sync_to_async(ApiToken.objects.update)(last_used_at=None)
    lane = lanes.EventsLane(django_must_not_answer)
    status, headers, content = await get(lane, f"/api/v1/sessions/{SESSION}/events", "since=2", {"Authorization": f"Bearer {tokens['member']}"})
    assert status == 200 and headers["content-type"] == "application/json; charset=utf-8"
    assert [e["seq"] for e in json.loads(content)["events"]] == [2]
    token = await sync_to_async(ApiToken.usable_for)(tokens["member"])
    assert token.last_used_at is not None


async def test_every_other_request_reaches_django_untouched(world):
    tokens = await world()
    seen = []

    async def django(scope, receive, send):
        seen.append((scope["method"], scope["path"], scope["query_string"], await receive()))
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    lane = lanes.EventsLane(django)
    bearer = {"Authorization": f"Bearer {tokens['member']}"}
    await get(lane, f"/api/v1/sessions/{SESSION}/messages", "", bearer)  # another path
    await get(lane, f"/api/v1/sessions/{SESSION}/events", "since=x", bearer)  # a query for Django
    await get(lane, f"/api/v1/sessions/{SESSION}/events", "", {"Authorization": f"Bearer {tokens['other_project']}"})  # no access
    assert [(method, path, query) for method, path, query, _ in seen] == [
        ("GET", f"/api/v1/sessions/{SESSION}/messages", b""),
        ("GET", f"/api/v1/sessions/{SESSION}/events", b"since=x"),
        ("GET", f"/api/v1/sessions/{SESSION}/events", b""),
    ]
    assert all(message == {"type": "http.request", "body": b"", "more_body": False} for *_, message in seen)  # the body as sent


@pytest.mark.parametrize("redirect", [False, True])
async def test_https_settings_apply_to_the_lane_as_to_django(redirect, world, settings):
    tokens = await world()
    settings.SECURE_HSTS_SECONDS = 3600
    settings.SECURE_SSL_REDIRECT = redirect
    django_app = get_asgi_application()  # middleware read these settings when built
    lane = lanes.EventsLane(django_app)
    answers = [
        (scheme, *await get(app, f"/api/v1/sessions/{SESSION}/events", "", {"Authorization": f"Bearer {tokens['member']}"}, scheme=scheme))
        for app in (lane, django_app) for scheme in ("http", "https")
    ]
    assert answers[:2] == answers[2:]
    assert [status for _, status, _, _ in answers[:2]] == ([301, 200] if redirect else [200, 200])
    assert "strict-transport-security" in answers[1][2] and "strict-transport-security" not in answers[0][2]


async def test_a_database_that_cannot_be_reached_gets_the_middlewares_503(world, monkeypatch):
    tokens = await world()

    def unreachable(*args, **kwargs):
        raise OperationalError("connection refused")

    monkeypatch.setattr(selectors, "get_session", unreachable)
    answers = [await get(app, f"/api/v1/sessions/{SESSION}/events", "", {"Authorization": f"Bearer {tokens['member']}"}) for app in (application, django_asgi_app)]
    assert answers[0] == answers[1]
    status, headers, content = answers[0]
    assert status == 503 and headers["retry-after"] == "5" and json.loads(content)["error"] == "database_unavailable"
