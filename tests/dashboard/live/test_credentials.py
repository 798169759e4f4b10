"""A token that stops authenticating, or a user who leaves a project, closes the open streams they opened (dashboard.live.credentials).

Real JSON streams (channels' WebsocketCommunicator through the ASGI
application), real tokens revoked through services.revoke_token, and the
real per-process check task at a short interval (one test keeps the default).
"""

from __future__ import annotations

import asyncio
import threading
from datetime import timedelta

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings as django_settings
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from dashboard.asgi import application
from dashboard.live import credentials, stream
from dashboard.live.consumers import CLOSE_NOT_FOUND, CLOSE_RENEW, CLOSE_UNAUTHENTICATED
from dashboard.live.credentials import Registration
from sessions_app import services
from sessions_app.models import ApiToken, Project, Role, hash_token
from sessions_app.selectors import access
from tests.access import member, token_for
from tests.conftest import ApiClient
from tests.dashboard.conftest import QUIET, WAIT, down_for
from tests.dashboard.live.test_consumers import append, close, closed_with, create, frames, open_socket, socket

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio, pytest.mark.usefixtures("slow_poll", "fresh_layer")]

QUICK_CHECK = 0.2  # seconds between checks in most tests


@pytest.fixture(autouse=True)
def fresh_watcher(monkeypatch):
    monkeypatch.setattr(credentials, "_watcher", None)  # never one a failed test left behind


@pytest.fixture
def quick_checks(settings):
    settings.TURNLOG_CREDENTIAL_CHECK_SECONDS = QUICK_CHECK


@database_sync_to_async
def row_of(secret: str) -> ApiToken:
    return ApiToken.objects.select_related("user").get(token_sha256=hash_token(secret))


@database_sync_to_async
def revoke(secret: str) -> None:
    token = ApiToken.objects.select_related("user").get(token_sha256=hash_token(secret))
    assert services.revoke_token(token=token)


@database_sync_to_async
def expire(secret: str) -> None:
    """Move the expiry into the past (issue_token refuses to issue an expired token)."""
    ApiToken.objects.filter(token_sha256=hash_token(secret)).update(expires_at=timezone.now() - timedelta(seconds=1))


async def close_code(ws, timeout: float) -> int:
    """The code of the next message, which must be the socket's close; then the server's disconnect, as Daphne sends it."""
    message = await ws.receive_output(timeout=timeout)
    assert message["type"] == "websocket.close", message
    await ws.disconnect(code=message["code"], timeout=WAIT)
    return message["code"]


async def quiet_while(ws, condition, limit: float = WAIT) -> None:
    """Nothing arrives on `ws` while `condition()` holds, which must stop holding within `limit` seconds."""
    deadline = asyncio.get_running_loop().time() + limit
    while condition():
        assert asyncio.get_running_loop().time() < deadline, "the condition still holds"
        assert await ws.receive_nothing(QUICK_CHECK / 2)


async def registered(sockets: int) -> None:
    """Wait until that many sockets are watched (a socket registers once it has read its session, after accepting)."""
    deadline = asyncio.get_running_loop().time() + WAIT
    while credentials.watched_sockets() != sockets:
        assert asyncio.get_running_loop().time() < deadline, f"{credentials.watched_sockets()} sockets watched, not {sockets}"
        await asyncio.sleep(0.01)


# Revocation -------------------------------------------------------------


async def test_revoking_a_token_closes_its_open_stream_with_4401(sid, token, quick_checks):
    await create(sid, 2)
    ws = await open_socket(sid, token=token)
    assert len(await frames(ws, 2)) == 2
    assert await ws.receive_nothing(3 * QUICK_CHECK), "a usable token's stream stays open across checks"

    loop = asyncio.get_running_loop()
    await revoke(token)
    revoked_at = loop.time()
    assert await close_code(ws, timeout=3) == CLOSE_UNAUTHENTICATED
    assert loop.time() - revoked_at < 3 * QUICK_CHECK + 1
    assert credentials.watched_tokens() == set()
    assert (await database_sync_to_async(ApiClient(token).get)("/api/v1/sessions")).status_code == 401


async def test_at_the_default_interval_a_revoked_tokens_stream_closes_within_three_seconds(sid, token):
    assert django_settings.TURNLOG_CREDENTIAL_CHECK_SECONDS == 2, "this test is about the default"
    await create(sid)
    ws = await open_socket(sid, token=token)
    loop = asyncio.get_running_loop()
    await revoke(token)
    revoked_at = loop.time()
    assert await close_code(ws, timeout=3.5) == CLOSE_UNAUTHENTICATED
    assert loop.time() - revoked_at <= 3


async def test_every_stream_of_the_revoked_token_closes_and_only_those(sid, user, token, quick_checks):
    other = await database_sync_to_async(token_for)(user)
    await create(sid)
    first, second = await open_socket(sid, token=token), await open_socket(sid, token=token)
    kept = await open_socket(sid, token=other)
    await revoke(token)
    assert await close_code(first, timeout=3) == CLOSE_UNAUTHENTICATED
    assert await close_code(second, timeout=3) == CLOSE_UNAUTHENTICATED
    assert credentials.watched_tokens() == {(await row_of(other)).pk}
    await append(sid, 1)
    assert [e["seq"] for e in await frames(kept, 1)] == [0], "the other token's stream still streams"
    await close(kept)


async def test_a_login_cookie_stream_of_the_same_user_is_not_affected(sid, token, session_cookie, quick_checks):
    await create(sid)
    by_token = await open_socket(sid, token=token)
    by_cookie = await open_socket(sid, cookie=session_cookie, origin="http://testserver")
    await revoke(token)
    assert await close_code(by_token, timeout=3) == CLOSE_UNAUTHENTICATED
    assert await by_cookie.receive_nothing(3 * QUICK_CHECK)
    await append(sid, 1)
    assert [e["seq"] for e in await frames(by_cookie, 1)] == [0]
    await close(by_cookie)


async def test_deactivating_the_tokens_owner_closes_its_streams(sid, user, token, quick_checks):
    await create(sid)
    ws = await open_socket(sid, token=token)
    user.is_active = False
    await database_sync_to_async(user.save)(update_fields=["is_active"])
    assert await close_code(ws, timeout=3) == CLOSE_UNAUTHENTICATED


# Expiry -----------------------------------------------------------------


async def test_a_token_that_expires_while_its_stream_is_open_closes_it_at_the_next_check(sid, user, quick_checks):
    lifetime = 1.5
    expires_at = timezone.now() + timedelta(seconds=lifetime)
    secret = await database_sync_to_async(token_for)(user, expires_at=expires_at)
    await create(sid)
    ws = await open_socket(sid, token=secret)
    assert await ws.receive_nothing(lifetime / 2), "open until it expires"
    assert await close_code(ws, timeout=lifetime + 2) == CLOSE_UNAUTHENTICATED
    late = (timezone.now() - expires_at).total_seconds()
    assert 0 <= late <= 3 * QUICK_CHECK + 1, "closed at the first check after the expiry"


async def test_an_expired_token_is_refused_at_connect_and_by_the_api(sid, token):
    await create(sid)
    await expire(token)
    assert await closed_with(socket(sid, token=token)) == CLOSE_UNAUTHENTICATED
    answer = await database_sync_to_async(ApiClient(token).get)("/api/v1/sessions")
    assert answer.status_code == 401
    assert answer.json()["error"] == "unauthenticated"
    assert credentials.watched_sockets() == 0 and not credentials.watcher_running()


async def test_a_revoked_token_is_refused_at_connect_and_by_the_api(sid, token):
    await create(sid)
    await revoke(token)
    assert await closed_with(socket(sid, token=token)) == CLOSE_UNAUTHENTICATED
    assert (await database_sync_to_async(ApiClient(token).get)("/api/v1/sessions")).status_code == 401


# The check task ---------------------------------------------------------


async def test_the_check_runs_only_while_sockets_are_open(sid, token, quick_checks):
    await create(sid)
    assert not credentials.watcher_running()
    token_id = (await row_of(token)).pk
    first, second = await open_socket(sid, token=token), await open_socket(sid, token=token)
    await registered(2)
    assert credentials.watched_tokens() == {token_id} and credentials.watcher_running()
    task = credentials._watcher.task
    await close(first)
    assert credentials.watched_tokens() == {token_id} and credentials.watcher_running()
    await close(second)
    assert credentials.watched_tokens() == set() and not credentials.watcher_running()
    await asyncio.sleep(0)
    assert task.done(), "the task ends with the last socket"


async def test_a_token_socket_refused_for_its_session_is_never_watched(token):
    assert await closed_with(socket("no-such-session", token=token)) == 4404
    assert credentials.watched_sockets() == 0 and not credentials.watcher_running()


async def test_each_check_asks_once_about_every_open_socket(sid, user, token, quick_checks, monkeypatch):
    other = await database_sync_to_async(token_for)(user)
    asked: list[list[int | None]] = []
    lost = credentials.lost

    def spy(registrations):
        asked.append(sorted(r.token.pk for r in registrations))
        return lost(registrations)

    monkeypatch.setattr(credentials, "lost", spy)
    await create(sid)
    sockets = [await open_socket(sid, token=token), await open_socket(sid, token=token), await open_socket(sid, token=other)]
    await asyncio.sleep(3.5 * QUICK_CHECK)
    assert len(asked) >= 2 and all(call == asked[0] for call in asked), asked
    token_id, other_id = (await row_of(token)).pk, (await row_of(other)).pk
    assert asked[0] == sorted([token_id, token_id, other_id])
    for ws in sockets:
        await close(ws)


async def test_a_token_registered_during_a_check_is_left_to_the_next_one(user, quick_checks, monkeypatch):
    first, second = [await row_of(await database_sync_to_async(token_for)(user)) for _ in range(2)]
    in_query, release = threading.Event(), threading.Event()
    lost = credentials.lost

    def slow(registrations):
        in_query.set()
        release.wait(WAIT)
        return lost(registrations)

    monkeypatch.setattr(credentials, "lost", slow)
    closed: list[int] = []

    def registration(token: ApiToken) -> credentials.Registration:
        async def close_socket(why):
            closed.append(token.pk)

        return credentials.Registration(user_id=user.pk, token=token, project_id=token.project_id, close=close_socket)

    registrations = [credentials.register(registration(first))]
    assert await asyncio.to_thread(in_query.wait, WAIT)
    registrations.append(credentials.register(registration(second)))  # not among the sockets being checked
    release.set()
    await asyncio.sleep(3 * QUICK_CHECK)
    assert closed == [] and credentials.watched_tokens() == {first.pk, second.pk}
    for registration in registrations:
        credentials.unregister(registration)
    assert not credentials.watcher_running()


@database_sync_to_async
def check_queries(tokens: list[ApiToken]) -> tuple[list[tuple[int, str]], int]:
    async def never(why):
        raise AssertionError("not closed by a check of its verdict")

    registrations = [credentials.Registration(user_id=t.user_id, token=t, project_id=t.project_id, close=never) for t in tokens]
    with CaptureQueriesContext(connection) as queries:
        verdicts = credentials.lost(registrations)
    return [(registration.token.pk, why) for registration, why in verdicts], len(queries)


async def test_the_verdicts_of_every_socket_take_three_queries(user):
    secrets = [await database_sync_to_async(token_for)(user, name=name) for name in ("kept", "revoked", "expired")]
    kept, revoked, expired = [await row_of(secret) for secret in secrets]
    await revoke(secrets[1])
    await expire(secrets[2])
    verdicts, queries = await check_queries([kept, revoked, expired] * 20)
    assert sorted(set(verdicts)) == [(revoked.pk, credentials.LOST_CREDENTIAL), (expired.pk, credentials.LOST_CREDENTIAL)]
    assert queries == 3, "tokens, users, memberships: whatever the number of sockets"


async def test_a_database_outage_skips_rounds_and_closes_no_socket_for_it(sid, token, quick_checks, monkeypatch, fresh_outage, caplog):
    await create(sid)
    ws = await open_socket(sid, token=token)
    await registered(1)
    assert await ws.receive_nothing(3 * QUICK_CHECK)
    # Every check reads the tokens first: the periodic rounds, and those the revocation's message starts.
    monkeypatch.setattr(access, "usable_token_ids", flaky := down_for(3, access.usable_token_ids))
    await revoke(token)
    # The rounds that cannot read the tokens close nothing (the revoked token included: it is not known yet).
    await quiet_while(ws, lambda: len(flaky.failures) < 3)
    assert await close_code(ws, timeout=3) == CLOSE_UNAUTHENTICATED
    assert sum("unreachable" in r.getMessage() for r in caplog.records) == 1, "one warning per outage, not one per round"


async def test_a_database_outage_does_not_close_a_usable_tokens_stream(sid, token, quick_checks, monkeypatch, fresh_outage):
    await create(sid)
    ws = await open_socket(sid, token=token)
    monkeypatch.setattr(credentials, "lost", flaky := down_for(4, credentials.lost))
    await quiet_while(ws, lambda: len(flaky.failures) < 4)
    assert await ws.receive_nothing(3 * QUICK_CHECK), "open after the outage too"
    await append(sid, 1)
    assert [e["seq"] for e in await frames(ws, 1)] == [0]
    await close(ws)


# Membership -------------------------------------------------------------


@database_sync_to_async
def leave_project(user) -> None:
    services.set_membership(project=Project.default(), user=user, role=None)


async def test_leaving_the_project_closes_token_and_login_streams_with_4404(sid, user, token, session_cookie, quick_checks):
    await create(sid)
    by_token = await open_socket(sid, token=token)
    by_cookie = await open_socket(sid, cookie=session_cookie, origin="http://testserver")
    assert await by_token.receive_nothing(3 * QUICK_CHECK), "a member's streams stay open across checks"
    await leave_project(user)
    assert await close_code(by_token, timeout=3) == CLOSE_NOT_FOUND
    assert await close_code(by_cookie, timeout=3) == CLOSE_NOT_FOUND
    assert credentials.watched_sockets() == 0


async def test_a_lowered_role_keeps_the_stream_while_it_may_still_read(sid, user, token, quick_checks):
    await create(sid)
    ws = await open_socket(sid, token=token)
    await database_sync_to_async(member)(user, Role.VIEWER)
    assert await ws.receive_nothing(4 * QUICK_CHECK), "a viewer still reads"
    await append(sid, 1)
    assert [e["seq"] for e in await frames(ws, 1)] == [0]
    await close(ws)


async def test_the_list_socket_is_renewed_when_the_projects_its_user_reads_change(user, session_cookie, quick_checks):
    team = await database_sync_to_async(Project.objects.create)(slug="team", name="Team")
    ws = WebsocketCommunicator(
        application, "/ws/sessions/live", headers=[(b"cookie", f"{django_settings.SESSION_COOKIE_NAME}={session_cookie}".encode()), (b"origin", b"http://testserver"), (b"host", b"testserver")]
    )
    connected, _ = await ws.connect(timeout=WAIT)
    assert connected and await ws.receive_nothing(3 * QUICK_CHECK), "unchanged access: the list stays open"
    await database_sync_to_async(member)(user, Role.VIEWER, team)
    assert await close_code(ws, timeout=3) == CLOSE_RENEW, "reconnects and lists the new project's sessions too"


# Each frame's check -----------------------------------------------------


async def test_revoking_a_token_closes_its_idle_streams_at_once(sid, token, periodic_check_off):
    await create(sid)
    ws = await open_socket(sid, token=token)
    await revoke(token)
    assert await close_code(ws, timeout=WAIT) == CLOSE_UNAUTHENTICATED


async def test_after_a_revocation_its_stream_sends_no_event_even_before_it_hears_of_it(sid, token, periodic_check_off, nothing_told):
    await create(sid)
    ws = await open_socket(sid, token=token)
    await registered(1)
    assert await ws.receive_nothing(3 * QUICK_CHECK), "open, and past the check of its registration"
    await revoke(token)
    assert await ws.receive_nothing(3 * QUICK_CHECK), "nothing tells this process: the idle stream stays open"
    await append(sid, 1)
    assert await close_code(ws, timeout=WAIT) == CLOSE_UNAUTHENTICATED, "closed instead of sending seq 0"


async def test_one_round_clears_the_frames_of_every_socket_waiting(sid, user, token, session_cookie, periodic_check_off, monkeypatch):
    """Six sockets get the same commit: their checks share rounds (a round per commit, not per socket)."""
    rounds: list[list[Registration]] = []
    ended = credentials.ended_credentials

    def spy(registrations):
        rounds.append(list(registrations))
        return ended(registrations)

    monkeypatch.setattr(credentials, "ended_credentials", spy)
    await create(sid)
    sockets = [await open_socket(sid, token=token) for _ in range(3)]
    sockets += [await open_socket(sid, cookie=session_cookie, origin="http://testserver") for _ in range(3)]
    await registered(6)
    assert await sockets[-1].receive_nothing(3 * QUICK_CHECK), "past the checks of their registrations"
    rounds.clear()
    await append(sid, 1)
    for ws in sockets:
        assert [e["seq"] for e in await frames(ws, 1)] == [0]
    assert sorted(len(asked) for asked in rounds) != [1] * 6, "one round per socket"
    assert sum(len(asked) for asked in rounds) == 6 and len(rounds) <= 2, [len(asked) for asked in rounds]
    for ws in sockets:
        await close(ws)


async def test_a_round_clears_only_the_frames_that_asked_before_it_started(user, periodic_check_off, nothing_told, monkeypatch):
    """A token revoked during a round, for a frame that asked during it, is seen by the next round."""
    first_secret, second_secret = [await database_sync_to_async(token_for)(user) for _ in range(2)]
    first, second = await row_of(first_secret), await row_of(second_secret)
    in_query, release, armed = threading.Event(), threading.Event(), threading.Event()
    rounds: list[list[int]] = []
    ended = credentials.ended_credentials

    def slow(registrations):
        if armed.is_set():
            rounds.append([r.token.pk for r in registrations])
        if len(rounds) == 1:
            in_query.set()
            release.wait(WAIT)
        return ended(registrations)

    monkeypatch.setattr(credentials, "ended_credentials", slow)

    async def never(why):
        pass

    registrations = [
        credentials.register(Registration(user_id=user.pk, token=t, project_id=t.project_id, close=never)) for t in (first, second)
    ]
    await asyncio.sleep(3 * QUICK_CHECK)  # past the checks of their registrations
    armed.set()
    first_cleared = asyncio.ensure_future(credentials.still_authenticates(registrations[0]))
    assert await asyncio.to_thread(in_query.wait, WAIT)
    second_cleared = asyncio.ensure_future(credentials.still_authenticates(registrations[1]))
    await revoke(second_secret)
    release.set()
    assert await asyncio.wait_for(first_cleared, WAIT) is True
    assert await asyncio.wait_for(second_cleared, WAIT) is False, "the round that started before the revocation did not clear it"
    assert rounds == [[first.pk], [second.pk]]
    for registration in registrations:
        credentials.unregister(registration)


async def test_a_database_outage_holds_the_frames_until_a_check_can_be_made(sid, token, periodic_check_off, monkeypatch, fresh_outage):
    """Neither closed for it nor sent unchecked: the event is sent once the check answers."""
    monkeypatch.setattr(stream, "DB_RETRY_CAP", 0.2)
    await create(sid)
    ws = await open_socket(sid, token=token)
    await registered(1)
    assert await ws.receive_nothing(3 * QUICK_CHECK), "past the check of its registration"
    monkeypatch.setattr(credentials, "ended_credentials", flaky := down_for(4, credentials.ended_credentials))
    await append(sid, 1)
    await quiet_while(ws, lambda: len(flaky.failures) < 4)
    assert [e["seq"] for e in await frames(ws, 1)] == [0]
    await close(ws)


async def test_a_revocation_during_an_outage_is_seen_by_the_check_that_finally_answers(sid, token, periodic_check_off, nothing_told, monkeypatch, fresh_outage):
    await create(sid)
    ws = await open_socket(sid, token=token)
    await registered(1)
    assert await ws.receive_nothing(3 * QUICK_CHECK), "past the check of its registration"
    monkeypatch.setattr(credentials, "ended_credentials", flaky := down_for(2, credentials.ended_credentials))
    await append(sid, 1)
    await quiet_while(ws, lambda: len(flaky.failures) < 1)
    await revoke(token)
    assert await close_code(ws, timeout=WAIT) == CLOSE_UNAUTHENTICATED, "closed instead of sending seq 0"
