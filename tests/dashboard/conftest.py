"""Fixtures of the websocket tests (test_consumers, test_live)."""

from __future__ import annotations

import asyncio
import contextlib
import uuid

import pytest
import pytest_asyncio
from channels import DEFAULT_CHANNEL_LAYER
from channels.db import database_sync_to_async
from channels.layers import channel_layers
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.db import OperationalError, connections
from django.test import Client

from dashboard import outage
from dashboard.live import stream
from sessions_app.models import Project, Role
from tests.access import member, token_for
from tests.conftest import load_factor
from tests.servers import DaphneServer, RedisServer

QUIET = 0.3  # how long "nothing more arrives" is watched for
# The longest a frame (or a socket's accept) that must come may take: a busy worker waits for a core.
WAIT = 3 * load_factor()
# Sockets a test opened, closed after it even when it failed.
opened: list[WebsocketCommunicator] = []


@pytest.fixture
def viewer(client, django_user_model):
    """A page client logged in as a member of the default project: reads and forks, but may not recover."""
    user = django_user_model.objects.create_user("viewer")
    member(user)
    client.force_login(user)
    return client


@pytest.fixture
def operator(client, django_user_model):
    """A page client logged in as a staff operator of the default project: may recover."""
    user = django_user_model.objects.create_user("ops", is_staff=True)
    member(user, Role.OPERATOR)
    client.force_login(user)
    return client


@pytest.fixture
def redis_server(tmp_path):
    """A redis-server of this test alone (tests.servers.RedisServer): it can be killed and started again."""
    server = RedisServer(tmp_path / "redis.log").start()
    yield server
    server.kill()


@pytest.fixture
def slow_poll(monkeypatch):
    monkeypatch.setattr(stream, "POLL_INTERVAL", 3600)
    monkeypatch.setattr(stream, "_watcher", None)  # never one a failed test left behind


@pytest.fixture
def fresh_outage(monkeypatch):
    """An outage log of this test's own (none left over from another test), with quick retries."""
    monkeypatch.setattr(stream, "DB_RETRY_FIRST", 0.05)
    monkeypatch.setattr(outage, "database_outage", outage.DatabaseOutage())


def down_for(calls: int, function):
    """`function` behind a database that refuses its first `calls` calls; `.failures` counts them."""
    failures = []

    def flaky(*args, **kwargs):
        if len(failures) < calls:
            failures.append(1)
            raise OperationalError("connection refused")
        return function(*args, **kwargs)

    flaky.failures = failures
    return flaky


@pytest_asyncio.fixture
async def fresh_layer():
    """A new channel layer per test: each test has its own event loop, and
    layers keep loop-bound state (queues, locks, connection pools). Never
    flushed: Redis may be shared with other runs, hence the unique session ids."""
    channel_layers.backends.pop(DEFAULT_CHANNEL_LAYER, None)
    opened.clear()
    yield
    for communicator in opened:  # sockets a failed test left open
        with contextlib.suppress(Exception, asyncio.CancelledError):
            await communicator.disconnect(timeout=WAIT)
    # channels' communicator disables close_old_connections while it waits, so
    # the worker thread may still hold a connection (PostgreSQL then refuses
    # to drop the test database): close it there.
    await database_sync_to_async(connections.close_all)()
    layer = channel_layers.backends.pop(DEFAULT_CHANNEL_LAYER, None)
    if hasattr(layer, "close_pools"):  # Redis: finish its cleaners in this loop
        await layer.close_pools()
    assert stream.watched_sessions() == set(), "a stream was left watched after its socket closed"


@pytest.fixture
def user(django_user_model):
    """A member of the default project (every session these tests make lands there)."""
    user = django_user_model.objects.create_user("viewer")
    member(user)
    return user


@pytest.fixture
def team():
    """A project the `user` fixture is no member of."""
    return Project.objects.create(slug="team", name="The Team")


@pytest.fixture
def token(user):
    return token_for(user)


@pytest.fixture
def session_cookie(user):
    client = Client()
    client.force_login(user)
    return client.cookies[settings.SESSION_COOKIE_NAME].value


@pytest.fixture
def sid():
    return f"ws-{uuid.uuid4().hex[:16]}"


@pytest.fixture
def start_daphne(transactional_db, tmp_path):
    """Starts Daphnes (tests.servers) on the test database with extra environment; all are stopped after the test."""
    servers = []

    def start(**env: str) -> DaphneServer:
        server = DaphneServer(connections["default"].settings_dict, tmp_path / f"daphne-{len(servers)}.log", **env)
        servers.append(server)
        return server.start()

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def periodic_check_off(settings):
    """The periodic round of credential checks far away: whatever closes a socket is the end being told, or a frame's check."""
    settings.TURNLOG_CREDENTIAL_CHECK_SECONDS = 3600


@pytest.fixture
def nothing_told(monkeypatch):
    """No process hears that a credential ended: only each frame's own check can see it."""
    from dashboard.live import credentials

    async def deaf(watcher):
        return

    monkeypatch.setattr(credentials._AccessWatcher, "_listen", deaf, raising=False)
