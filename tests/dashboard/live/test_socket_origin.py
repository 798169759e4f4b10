"""The Origin of a login-cookie socket is checked as Django's CSRF check judges a POST's.

Scheme, host and port as the socket was opened (wss is https), behind a
proxy as the proxy reports them (SECURE_PROXY_SSL_HEADER,
USE_X_FORWARDED_HOST), or one of CSRF_TRUSTED_ORIGINS; any other port,
scheme or allowed host is another origin. For the JSON stream and the pages' sockets alike.
"""

from __future__ import annotations

import pytest
from channels.testing import WebsocketCommunicator
from django.conf import settings as django_settings

from dashboard.asgi import application
from tests.dashboard.conftest import QUIET, WAIT, opened
from tests.dashboard.live.test_consumers import closed_with, create

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio, pytest.mark.usefixtures("slow_poll", "fresh_layer")]

PROXIED = {"x-forwarded-proto": "https", "x-forwarded-host": "turnlog.example"}
PROXY_SETTINGS = {"SECURE_PROXY_SSL_HEADER": ("HTTP_X_FORWARDED_PROTO", "https"), "USE_X_FORWARDED_HOST": True}
# (origin, Host header, scheme, other headers, settings)
ALLOWED = {
    "same origin": ("http://testserver", "testserver", "ws", {}, {}),
    "same origin with its port": ("http://testserver:8000", "testserver:8000", "ws", {}, {}),
    "https for wss": ("https://testserver", "testserver", "wss", {}, {}),
    "as the trusted proxy reports it": ("https://turnlog.example", "10.0.0.5:8000", "ws", PROXIED, PROXY_SETTINGS),
    "a trusted origin": ("https://app.example", "testserver", "ws", {}, {"CSRF_TRUSTED_ORIGINS": ["https://app.example"]}),
}
REFUSED = {
    "another port": ("http://testserver:8001", "testserver:8000", "ws", {}, {}),
    "a port the socket lacks": ("http://testserver:8000", "testserver", "ws", {}, {}),
    "https for ws": ("https://testserver", "testserver", "ws", {}, {}),
    "http for wss": ("http://testserver", "testserver", "wss", {}, {}),
    "another allowed host": ("http://localhost", "testserver", "ws", {}, {}),
    "proxy headers without a trusted proxy": ("https://turnlog.example", "testserver", "ws", PROXIED, {}),
    "another site": ("https://evil.example", "testserver", "ws", {}, {}),
    "a look-alike": ("http://testserver.evil.example", "testserver", "ws", {}, {}),
    "an opaque origin": ("null", "testserver", "ws", {}, {}),
    "no origin": (None, "testserver", "ws", {}, {}),
    "a disallowed host": ("http://evil.example", "evil.example", "ws", {}, {}),
}
PATHS = {"json stream": "/ws/v1/sessions/{sid}/events", "page": "/ws/sessions/{sid}/live?after=0", "list": "/ws/sessions/live"}


def cookie_socket(path: str, cookie: str, origin: str | None, host: str, scheme: str, headers: dict) -> WebsocketCommunicator:
    sent = [(b"host", host.encode()), (b"cookie", f"{django_settings.SESSION_COOKIE_NAME}={cookie}".encode())]
    sent += [(b"origin", origin.encode())] if origin is not None else []
    sent += [(name.encode(), value.encode()) for name, value in headers.items()]
    communicator = WebsocketCommunicator(application, path, headers=sent)
    communicator.scope["scheme"] = scheme
    opened.append(communicator)
    return communicator


@pytest.fixture
def proxy_hosts(settings):
    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "turnlog.example", "10.0.0.5"]
    return settings


@pytest.mark.parametrize("path", PATHS.values(), ids=PATHS.keys())
@pytest.mark.parametrize("origin, host, scheme, headers, overrides", ALLOWED.values(), ids=ALLOWED.keys())
async def test_a_cookie_socket_from_its_own_origin_is_served(sid, session_cookie, proxy_hosts, path, origin, host, scheme, headers, overrides):
    for name, value in overrides.items():
        setattr(proxy_hosts, name, value)
    await create(sid, 1)
    communicator = cookie_socket(path.format(sid=sid), session_cookie, origin, host, scheme, headers)
    connected, _ = await communicator.connect(timeout=WAIT)
    assert connected
    if "events" in path:
        assert (await communicator.receive_json_from(timeout=WAIT))["event"]["seq"] == 0
    else:
        assert await communicator.receive_nothing(QUIET), "the socket stays open"
    await communicator.disconnect(timeout=WAIT)


@pytest.mark.parametrize("path", PATHS.values(), ids=PATHS.keys())
@pytest.mark.parametrize("origin, host, scheme, headers, overrides", REFUSED.values(), ids=REFUSED.keys())
async def test_a_cookie_socket_from_another_origin_is_closed_4403(sid, session_cookie, proxy_hosts, path, origin, host, scheme, headers, overrides):
    for name, value in overrides.items():
        setattr(proxy_hosts, name, value)
    await create(sid, 1)
    assert await closed_with(cookie_socket(path.format(sid=sid), session_cookie, origin, host, scheme, headers)) == 4403
