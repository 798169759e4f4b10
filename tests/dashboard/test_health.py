"""/healthz and /readyz (dashboard/health.py): in front of every middleware, JSON, 503 only without a database or migrations.

In-process requests go to the ASGI application as Daphne hands them over;
the outages are real: a Daphne pointed at a database that refuses
connections, a Redis port nobody listens on, a migration record removed.
"""

from __future__ import annotations

import http.client
import json

import pytest
import pytest_asyncio
from asgiref.sync import sync_to_async
from asgiref.testing import ApplicationCommunicator
from channels import DEFAULT_CHANNEL_LAYER
from channels.layers import channel_layers
from django.conf import settings
from django.db import connection

from dashboard import health
from dashboard.asgi import application
from tests.asgi import close_connections_of_the_sync_thread, http_scope, response_of
from tests.servers import DaphneServer, RedisServer, free_port

LOAD_BALANCER = "10.1.2.3"  # polls by address: a Host outside ALLOWED_HOSTS
# The suite's own channel layer (Redis when the suite runs with REDIS_URL), as the probes report it.
LAYER = "ok" if settings.REDIS_URL else "in-process"


@pytest_asyncio.fixture
async def layer_of_this_loop():
    """The channel layer keeps connection pools per event loop: each in-process test gets a new one, closed after it."""
    channel_layers.backends.pop(DEFAULT_CHANNEL_LAYER, None)
    yield
    layer = channel_layers.backends.pop(DEFAULT_CHANNEL_LAYER, None)
    if hasattr(layer, "close_pools"):
        await layer.close_pools()


pytestmark = pytest.mark.usefixtures(close_connections_of_the_sync_thread.__name__)
in_process = pytest.mark.usefixtures(layer_of_this_loop.__name__)


async def probe(path: str, method: str = "GET", **headers: str) -> tuple[int, dict[str, str], bytes]:
    communicator = ApplicationCommunicator(application, http_scope(method, path, {"Host": LOAD_BALANCER, **headers}))
    await communicator.send_input({"type": "http.request", "body": b""})
    return await response_of(communicator)


@pytest.fixture
def locked_down_site(settings):
    """Production's redirects and a site name the load balancer does not use."""
    settings.SECURE_SSL_REDIRECT = True
    settings.ALLOWED_HOSTS = ["turnlog.example.com"]


@pytest.mark.django_db
@pytest.mark.asyncio
@in_process
async def test_probes_answer_without_login_on_any_host_over_plain_http(locked_down_site):
    status, headers, body = await probe("/healthz")
    assert (status, json.loads(body)) == (200, {"status": "ok"})
    assert headers["content-type"] == "application/json" and headers["cache-control"] == "no-store"
    assert "set-cookie" not in headers

    status, headers, body = await probe("/readyz")
    assert status == 200, body
    assert json.loads(body) == {"status": "ok", "checks": {"database": "ok", "migrations": "ok", "channel_layer": LAYER}}

    # Anything else on the same request is refused as before (the Host is not the site's).
    status, _, _ = await probe("/login/")
    assert status == 400


@pytest.mark.django_db
@pytest.mark.asyncio
@in_process
async def test_probes_answer_get_and_head_only(locked_down_site):
    status, headers, body = await probe("/readyz", method="HEAD")
    assert (status, body) == (200, b"") and int(headers["content-length"]) > 0
    status, headers, body = await probe("/readyz", method="POST")
    assert status == 405 and headers["allow"] == "GET, HEAD"
    assert json.loads(body)["error"] == "method_not_allowed"


@pytest.mark.django_db
@pytest.mark.asyncio
@in_process
async def test_the_migrations_on_disk_are_read_once_per_process():
    await probe("/readyz")
    builds = health.expected_migrations.cache_info().misses
    for _ in range(5):
        assert (await probe("/readyz"))[0] == 200
    assert health.expected_migrations.cache_info().misses == builds


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
@in_process
async def test_an_unapplied_migration_makes_the_site_unavailable():
    def forget_the_latest(app: str) -> tuple[str, str]:
        with connection.cursor() as cursor:
            cursor.execute("SELECT id, name FROM django_migrations WHERE app = %s ORDER BY id DESC", [app])
            row_id, name = cursor.fetchone()
            cursor.execute("DELETE FROM django_migrations WHERE id = %s", [row_id])
        return name

    def record_again(app: str, name: str) -> None:
        with connection.cursor() as cursor:
            cursor.execute("INSERT INTO django_migrations (app, name, applied) VALUES (%s, %s, CURRENT_TIMESTAMP)", [app, name])

    name = await sync_to_async(forget_the_latest)("sessions_app")
    try:
        status, _, body = await probe("/readyz")
        assert status == 503, body
        assert json.loads(body) == {
            "status": "unavailable",
            "checks": {"database": "ok", "migrations": "unapplied", "channel_layer": LAYER},
            "unapplied_migrations": 1,
        }
        assert (await probe("/healthz"))[0] == 200  # alive all the same: restarting it would not migrate
    finally:
        await sync_to_async(record_again)("sessions_app", name)
    assert (await probe("/readyz"))[0] == 200


# Real servers --------------------------------------------------------------


def get(server: DaphneServer, path: str) -> tuple[int, dict]:
    client = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        client.request("GET", path, headers={"Host": LOAD_BALANCER})
        response = client.getresponse()
        return response.status, json.loads(response.read())
    finally:
        client.close()


@pytest.fixture
def start_daphne(transactional_db, tmp_path):
    servers = []

    def start(database: dict | None = None, **env: str) -> DaphneServer:
        # Production's HTTPS redirect and a site name that is not the address the probes use.
        env = {"DJANGO_SECURE_SSL_REDIRECT": "1", "DJANGO_ALLOWED_HOSTS": "turnlog.example.com", **env}
        server = DaphneServer(database or connection.settings_dict, tmp_path / f"daphne-{len(servers)}.log", **env)
        servers.append(server)
        return server.start()

    yield start
    for server in servers:
        server.stop()


@pytest.mark.timeout(90)
def test_daphne_is_ready_and_degraded_without_redis(start_daphne):
    server = start_daphne()
    assert get(server, "/healthz") == (200, {"status": "ok"})
    assert get(server, "/readyz") == (200, {"status": "ok", "checks": {"database": "ok", "migrations": "ok", "channel_layer": LAYER}})

    without_redis = start_daphne(REDIS_URL=f"redis://127.0.0.1:{free_port()}/0")
    assert get(without_redis, "/readyz") == (
        200,
        {"status": "degraded", "checks": {"database": "ok", "migrations": "ok", "channel_layer": "unreachable"}},
    )


@pytest.mark.timeout(90)
def test_daphne_with_redis_is_ready(start_daphne, tmp_path):
    redis_server = RedisServer(tmp_path / "redis.log").start()
    try:
        server = start_daphne(REDIS_URL=redis_server.url)
        assert get(server, "/readyz") == (200, {"status": "ok", "checks": {"database": "ok", "migrations": "ok", "channel_layer": "ok"}})
        redis_server.kill()
        assert get(server, "/readyz")[1]["status"] == "degraded"
    finally:
        redis_server.kill()


@pytest.mark.timeout(90)
@pytest.mark.parametrize(
    "database",
    [
        pytest.param(lambda tmp_path: {"ENGINE": "django.db.backends.sqlite3", "NAME": str(tmp_path / "no such dir" / "x.sqlite3")}, id="sqlite"),
        pytest.param(
            lambda tmp_path: {"ENGINE": "django.db.backends.postgresql", "NAME": "turnlog", "USER": "postgres", "HOST": "127.0.0.1", "PORT": free_port()},
            id="postgresql-refusing",
        ),
    ],
)
def test_daphne_without_its_database_is_alive_but_unavailable(start_daphne, tmp_path, database):
    server = start_daphne(database(tmp_path))
    assert get(server, "/healthz") == (200, {"status": "ok"})
    assert get(server, "/readyz") == (503, {"status": "unavailable", "checks": {"database": "unreachable", "migrations": "unknown", "channel_layer": LAYER}})
