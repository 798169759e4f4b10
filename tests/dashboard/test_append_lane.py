"""dashboard.lanes.AppendLane: bearer-token appends past Django's handler, answered as Django answers them.

Every request is sent twice, through the lane (the server's whole ASGI
application) and straight to Django's handler, on twin sessions: the status,
headers, body, stored rows and audit entries must be the same.
"""

from __future__ import annotations

import json
import re

import pytest
from asgiref.testing import ApplicationCommunicator
from django.core.asgi import get_asgi_application
from django.db import OperationalError

from dashboard import lanes as append_lane
from dashboard.asgi import application, django_asgi_app
from sessions_app import services
from sessions_app.models import ApiToken, AuditEntry, Event
from sessions_app.selectors import access
from tests.access import case_tokens
from tests.asgi import close_connections_of_the_sync_thread, http_scope, response_of  # noqa: F401 (the fixture)

pytestmark = [pytest.mark.asyncio, pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("close_connections_of_the_sync_thread")]

AT = "2025-01-01T00:00:00Z"


def user_message(text: str) -> dict:
    return {"type": "user_message", "data": {"content": text}, "time": AT}


async def call(app, path: str, body: bytes, headers: dict[str, str], *, chunk: int | None = None, scheme: str = "http") -> tuple[int, dict, bytes]:
    """One POST through an ASGI app; the body in chunks of `chunk` bytes when given."""
    scope = http_scope("POST", path, {"Content-Type": "application/json", **headers}, scheme=scheme)
    communicator = ApplicationCommunicator(app, scope)
    pieces = [body[i : i + chunk] for i in range(0, len(body), chunk)] if chunk else [body]
    for i, piece in enumerate(pieces or [b""]):
        await communicator.send_input({"type": "http.request", "body": piece, "more_body": i < len(pieces) - 1})
    return await response_of(communicator)


@pytest.fixture
def world(django_user_model):
    """Tokens for the cases, and twin sessions: `lane-<name>` and `djan-<name>`."""
    from asgiref.sync import sync_to_async

    def build():
        return case_tokens(django_user_model, scoped="read_only", scopes=["read"])

    return sync_to_async(build)


def twin(name: str) -> tuple[str, str]:
    return f"lane-{name}", f"djan-{name}"  # the same length: the same Content-Length


def create(session_id: str, events: list | None = None):
    from sessions_app.log.events import validate_batch

    services.create_session(session_id=session_id, agent_name="a")
    if events:
        services.append_events(session_id=session_id, events=validate_batch(events))


CASES = {
    # name: (token, body, extra headers)
    "one_event": ("member", {"events": [user_message("hi")]}, {}),
    "a_batch": ("member", {"events": [user_message("a"), {"type": "turn_start", "time": AT}, user_message("b")]}, {}),
    "expected_seq": ("member", {"events": [user_message("hi")], "expected_seq": 1}, {}),
    "seq_conflict": ("member", {"events": [user_message("hi")], "expected_seq": 7}, {}),
    "expected_seq_bool": ("member", {"events": [user_message("hi")], "expected_seq": True}, {}),
    "idempotent": ("member", {"events": [user_message("hi")]}, {"Idempotency-Key": "k1"}),
    "empty_batch": ("member", {"events": []}, {}),
    "events_not_a_list": ("member", {"events": {"type": "user_message"}}, {}),
    "bad_event": ("member", {"events": [user_message("a"), {"type": "bogus"}]}, {}),
    "lone_surrogate": ("member", {"events": [user_message("\ud800")]}, {}),
    "extra_key": ("member", {"events": [user_message("hi")], "more": 1}, {}),
    "long_key": ("member", {"events": [user_message("hi")]}, {"Idempotency-Key": "k" * 300}),
    "text_plain": ("member", {"events": [user_message("hi")]}, {"Content-Type": "text/plain"}),
    "form_encoded": ("member", {"events": [user_message("hi")]}, {"Content-Type": "application/x-www-form-urlencoded"}),
    "lowercase_bearer": ("member", {"events": [user_message("hi")]}, {}),
    "disallowed_host": ("member", {"events": [user_message("hi")]}, {"Host": "evil.example"}),
    "disallowed_user_agent": ("member", {"events": [user_message("hi")]}, {"User-Agent": "BadBot/1.0"}),
    "no_token": (None, {"events": [user_message("hi")]}, {}),
    "unknown_token": ("tl_nope", {"events": [user_message("hi")]}, {}),
    "revoked_token": ("revoked", {"events": [user_message("hi")]}, {}),
    "viewer": ("viewer", {"events": [user_message("hi")]}, {}),
    "read_scope": ("read_only", {"events": [user_message("hi")]}, {}),
    "other_project": ("other_project", {"events": [user_message("hi")]}, {}),
}


def body_of(case) -> bytes:
    _, body, _ = case
    return json.dumps(body).encode("utf-8", "surrogatepass")


def headers_of(name, tokens) -> dict:
    token, _, extra = CASES[name]
    secret = tokens.get(token, token)
    scheme = "bearer" if name == "lowercase_bearer" else "Bearer"
    return {**({"Authorization": f"{scheme} {secret}"} if secret else {}), **extra}


def stored(session_id: str) -> list[tuple]:
    return [
        (e.seq, e.type, e.time, e.data, e.call_id, e.turn_seq, e.step_seq, e.replace_start, e.replace_stop)
        for e in Event.objects.filter(session_id=session_id).order_by("seq")
    ]


def audited(session_id: str) -> list[tuple]:
    return sorted((a.action, a.actor_name, a.detail.get("capability")) for a in AuditEntry.objects.filter(target=session_id))


@pytest.mark.parametrize("name", list(CASES))
async def test_the_lane_answers_stores_and_audits_as_django_does(name, world, settings, monkeypatch):
    from asgiref.sync import sync_to_async

    from sessions_app.selectors import access

    # Every refusal recorded, not once a minute, so that one more written by the lane would show.
    monkeypatch.setattr(access, "DENIAL_RECORD_SECONDS", 0)
    settings.ALLOWED_HOSTS = ["testserver"]
    settings.DISALLOWED_USER_AGENTS = [re.compile("^BadBot")]

    tokens = await world()
    lane_id, django_id = twin(name)
    for session_id in (lane_id, django_id):
        await sync_to_async(create)(session_id, [user_message("first")])
    case = CASES[name]
    answers = {}
    for app, session_id in ((application, lane_id), (django_asgi_app, django_id)):
        status, headers, content = await call(app, f"/api/v1/sessions/{session_id}/events", body_of(case), headers_of(name, tokens))
        # The same request again: a replay, a second conflict or the next seqs, whichever it is.
        again = await call(app, f"/api/v1/sessions/{session_id}/events", body_of(case), headers_of(name, tokens))
        answers[app] = [
            (s, h, c.decode().replace(session_id, "<id>")) for s, h, c in ((status, headers, content), again)
        ]
    assert answers[application] == answers[django_asgi_app]
    assert await sync_to_async(stored)(lane_id) == await sync_to_async(stored)(django_id)
    # A refusal is audited once per request, by the API: the lane's own check writes nothing.
    assert await sync_to_async(audited)(lane_id) == await sync_to_async(audited)(django_id)
    if name in {"viewer", "read_scope", "other_project"}:
        assert len(await sync_to_async(audited)(lane_id)) == 2


async def test_a_stored_batch_is_answered_by_the_lane_alone(world):
    from asgiref.sync import sync_to_async

    tokens = await world()
    await sync_to_async(create)("alone")

    async def django_must_not_answer(scope, receive, send):
        raise AssertionError("Django was asked")

    lane = append_lane.AppendLane(django_must_not_answer)
    status, headers, content = await call(
        lane, "/api/v1/sessions/alone/events", json.dumps({"events": [user_message("hi")]}).encode(), {"Authorization": f"Bearer {tokens['member']}"}
    )
    assert (status, json.loads(content)) == (201, {"first_seq": 0, "next_seq": 1})
    assert headers["content-type"] == "application/json; charset=utf-8"
    assert headers["x-content-type-options"] == "nosniff" and headers["x-frame-options"] == "DENY"
    assert "content-security-policy" in headers


async def test_the_lane_records_when_it_received_each_event(world):
    """The lane's own insert (sessions_app.lib.statements) stores the receive time; status and activity go by it."""
    from asgiref.sync import sync_to_async
    from django.utils import timezone

    from sessions_app.models import Session

    tokens = await world()
    await sync_to_async(create)("received")

    async def django_must_not_answer(scope, receive, send):
        raise AssertionError("Django was asked")

    before = timezone.now()
    body = {"events": [user_message("claims 2025"), {"type": "turn_start", "data": {"turn": 1}, "time": "2031-06-01T00:00:00Z"}]}
    status, _, _ = await call(
        append_lane.AppendLane(django_must_not_answer), "/api/v1/sessions/received/events", json.dumps(body).encode(),
        {"Authorization": f"Bearer {tokens['member']}"},
    )
    assert status == 201

    def read():
        session = Session.objects.get(pk="received")
        return session, list(Event.objects.filter(session=session).order_by("seq").values_list("time", "received_at"))

    session, rows = await sync_to_async(read)()
    after = timezone.now()
    assert [t.year for t, _ in rows] == [2025, 2031]  # claimed, as sent
    assert all(before <= received <= after for _, received in rows)
    assert session.last_activity_at == session.last_received_at == rows[-1][1] and session.last_event_at.year == 2031
    assert session.status == "running"


async def test_the_lane_records_a_tokens_use_at_most_once_a_minute(world):
    from datetime import timedelta

    from asgiref.sync import sync_to_async
    from django.utils import timezone

    tokens = await world()
    await sync_to_async(create)("used")
    row = await sync_to_async(ApiToken.usable_for)(tokens["member"])
    assert row.last_used_at is None

    async def django_must_not_answer(scope, receive, send):
        raise AssertionError("Django was asked")

    lane = append_lane.AppendLane(django_must_not_answer)

    async def append_and_read_last_use():
        body = json.dumps({"events": [user_message("hi")]}).encode()
        status, _, _ = await call(lane, "/api/v1/sessions/used/events", body, {"Authorization": f"Bearer {tokens['member']}"})
        assert status == 201
        return (await sync_to_async(ApiToken.objects.get)(pk=row.pk)).last_used_at

    first = await append_and_read_last_use()
    assert first is not None and (timezone.now() - first).total_seconds() < 30
    assert await append_and_read_last_use() == first  # used within the minute: nothing written
    an_hour_ago = timezone.now() - timedelta(hours=1)
    await sync_to_async(ApiToken.objects.filter(pk=row.pk).update)(last_used_at=an_hour_ago)
    assert await append_and_read_last_use() > an_hour_ago + timedelta(minutes=59)


@pytest.mark.parametrize("chunk", [None, 7])
async def test_what_the_lane_leaves_to_django_reaches_it_with_the_whole_body(chunk, world, settings):
    from asgiref.sync import sync_to_async

    tokens = await world()
    await sync_to_async(create)("replayed")
    received = []

    async def recording(scope, receive, send):
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        received.append(body)
        await send({"type": "http.response.start", "status": 418, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    lane = append_lane.AppendLane(recording)
    refused = json.dumps({"events": [{"type": "bogus", "data": {"x": "y" * 50}}]}).encode()
    assert (await call(lane, "/api/v1/sessions/replayed/events", refused, {"Authorization": f"Bearer {tokens['member']}"}, chunk=chunk))[0] == 418
    settings.TURNLOG_MAX_REQUEST_BYTES = 40  # past the limit the lane stops reading: Django answers 413
    good = json.dumps({"events": [user_message("z" * 60)]}).encode()
    assert (await call(lane, "/api/v1/sessions/replayed/events", good, {"Authorization": f"Bearer {tokens['member']}"}, chunk=chunk))[0] == 418
    assert received == [refused, good]


async def test_a_database_that_cannot_be_reached_is_a_503_with_retry_after(world, monkeypatch):
    from asgiref.sync import sync_to_async

    tokens = await world()
    await sync_to_async(create)("down")

    def unreachable(*args, **kwargs):
        raise OperationalError("connection refused")

    monkeypatch.setattr(access, "locked_session_for_token", unreachable)
    status, headers, content = await call(
        application, "/api/v1/sessions/down/events", json.dumps({"events": [user_message("hi")]}).encode(), {"Authorization": f"Bearer {tokens['member']}"}
    )
    assert status == 503 and headers["retry-after"] == "5"
    assert json.loads(content)["error"] == "database_unavailable"
    assert headers["x-content-type-options"] == "nosniff"


@pytest.mark.parametrize("redirect", [False, True])
async def test_https_settings_apply_to_the_lane_as_to_django(redirect, world, settings):
    from asgiref.sync import sync_to_async

    tokens = await world()
    settings.SECURE_HSTS_SECONDS = 3600
    settings.SECURE_SSL_REDIRECT = redirect
    # Middleware read these settings when they are built: both apps anew.
    django_app = get_asgi_application()
    lane = append_lane.AppendLane(django_app)
    for session_id in twin("https"):
        await sync_to_async(create)(session_id)
    answers = []
    for app, session_id in zip((lane, django_app), twin("https")):
        for scheme in ("http", "https"):
            status, headers, content = await call(
                app, f"/api/v1/sessions/{session_id}/events", json.dumps({"events": [user_message("hi")]}).encode(),
                {"Authorization": f"Bearer {tokens['member']}"}, scheme=scheme,
            )
            headers.pop("location", None)  # names the session
            answers.append((scheme, status, headers, content))
    assert answers[:2] == answers[2:]
    assert [status for _, status, _, _ in answers[:2]] == ([301, 201] if redirect else [201, 201])
    assert "strict-transport-security" in answers[1][2] and "strict-transport-security" not in answers[0][2]


async def test_a_policy_changed_after_a_201_reaches_the_lanes_next_answer_as_djangos(world, settings):
    """The lane keeps its 201 headers between requests: a settings change must not leave them stale."""
    from asgiref.sync import sync_to_async

    tokens = await world()
    lane_id, django_id = twin("policy")
    for session_id in (lane_id, django_id):
        await sync_to_async(create)(session_id)
    lane = append_lane.AppendLane(django_asgi_app)
    body, headers = json.dumps({"events": [user_message("hi")]}).encode(), {"Authorization": f"Bearer {tokens['member']}"}
    _, before, _ = await call(lane, f"/api/v1/sessions/{lane_id}/events", body, headers)
    assert "default-src 'self'" in before["content-security-policy"]

    settings.CONTENT_SECURITY_POLICY = {"DIRECTIVES": {"default-src": ["'none'"]}}
    answers = [await call(app, f"/api/v1/sessions/{session_id}/events", body, headers) for app, session_id in ((lane, lane_id), (django_asgi_app, django_id))]
    assert [status for status, _, _ in answers] == [201, 201]
    assert answers[0][1] == answers[1][1]
    assert answers[0][1]["content-security-policy"] == "default-src 'none'"
