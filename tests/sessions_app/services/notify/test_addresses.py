"""Where webhooks and reconcilers may go (sessions_app.services.notify.addresses): an address that is, or embeds, a loopback,
private, link-local, multicast, reserved or unspecified one is refused unless TURNLOG_WEBHOOK_ALLOW_PRIVATE, when an
endpoint is saved and again at each connection (on what the name resolves to then); no redirect is followed."""

from __future__ import annotations

import ipaddress
import socket
from datetime import timedelta
from urllib.parse import urlsplit

import httpcore
import httpx
import pytest

from sessions_app import worker
from sessions_app.models import DeliveryAttempt, Project, WebhookEndpoint
from sessions_app.services import notify
from sessions_app.services.notify import addresses
from sessions_app.services.notify.addresses import refusal_for_url

from .crashes import crashed, stalled_clock

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("http://127.0.0.1:8000/hook", "127.0.0.1 is a loopback address"),
        ("http://localhost/hook", "localhost resolves to 127.0.0.1 is a loopback address"),
        ("http://[::1]/hook", "::1 is a loopback address"),
        ("http://169.254.169.254/latest/meta-data", "link-local"),
        ("http://10.1.2.3/hook", "10.1.2.3 is a private address"),
        ("http://192.168.0.10/hook", "192.168.0.10 is a private address"),
        ("http://[::ffff:127.0.0.1]/hook", "::ffff:127.0.0.1 embeds 127.0.0.1 (IPv4-mapped), a loopback address"),
        ("ftp://example.org/hook", "http:// or https://"),
    ],
)
def test_private_addresses_are_refused_unless_allowed(settings, url, words):
    settings.TURNLOG_WEBHOOK_ALLOW_PRIVATE = False
    assert words in refusal_for_url(url)
    with pytest.raises(notify.EndpointRefused) as refused:
        notify.create_endpoint(project=Project.default(), actor=None, url=url)
    assert refused.value.field == "url" and not WebhookEndpoint.objects.exists()


def test_a_public_address_passes_and_private_ones_pass_when_allowed(settings):
    settings.TURNLOG_WEBHOOK_ALLOW_PRIVATE = False
    assert refusal_for_url("https://93.184.215.14/hook") is None
    settings.TURNLOG_WEBHOOK_ALLOW_PRIVATE = True
    assert refusal_for_url("http://127.0.0.1:8000/hook") is None


def test_the_address_is_checked_again_at_each_connection(receiver, settings):
    """Saved while allowed, sent after the site stopped allowing it (or the name moved to a private address): refused."""
    hook = notify.create_endpoint(project=Project.default(), actor=None, url=receiver.url)
    session = crashed("crash-ssrf")
    worker.run_round(now=stalled_clock(session))
    settings.TURNLOG_WEBHOOK_ALLOW_PRIVATE = False

    [sent] = worker.deliver_webhooks(now=stalled_clock(session))

    assert sent.outcome == "retry" and receiver.received == []
    attempt = DeliveryAttempt.objects.get(delivery__endpoint=hook)
    assert attempt.status_code is None and "refused: 127.0.0.1 is a loopback address (allowed only with TURNLOG_WEBHOOK_ALLOW_PRIVATE)" in attempt.error


def test_a_redirect_is_not_followed(receiver):
    receiver.statuses = [307]
    notify.create_endpoint(project=Project.default(), actor=None, url=receiver.url)
    session = crashed("crash-redirect")
    at = stalled_clock(session)
    worker.run_round(now=at)
    [sent] = worker.deliver_webhooks(now=at)
    assert sent.outcome == "retry" and (sent.status_code, sent.error) == (307, "a redirect (not followed)")
    assert len(receiver.received) == 1
    worker.deliver_webhooks(now=at + timedelta(hours=1))
    assert len(receiver.received) == 2  # retried at the same URL


# Every IPv4 kind that is refused, and every IPv6 form that carries an IPv4 address: each form is refused for each kind,
# at save and at connect, naming the address, what it embeds and why.
REFUSED_V4 = {
    "loopback": "127.0.0.1",
    "private": "10.1.2.3",
    "link-local": "169.254.169.254",
    "multicast": "224.0.0.1",
    "unspecified": "0.0.0.0",
    "reserved": "240.0.0.1",
}


def _v4_groups(v4: str) -> str:
    n = int(ipaddress.IPv4Address(v4))
    return f"{n >> 16:x}:{n & 0xFFFF:x}"


def _teredo(server: str, client: str) -> str:
    inverted = ipaddress.IPv4Address(~int(ipaddress.IPv4Address(client)) & 0xFFFFFFFF)
    return f"2001:0:{_v4_groups(server)}:0:0:{_v4_groups(str(inverted))}"


WRAPPINGS = {
    "IPv4-mapped": lambda v4: f"::ffff:{v4}",
    "IPv4-compatible": lambda v4: f"::{_v4_groups(v4)}",
    "NAT64": lambda v4: f"64:ff9b::{v4}",
    "local-use NAT64": lambda v4: f"64:ff9b:1::{v4}",
    "6to4": lambda v4: f"2002:{_v4_groups(v4)}::1",
    "Teredo server": lambda v4: _teredo(v4, "8.8.8.8"),
    "Teredo client": lambda v4: _teredo("8.8.8.8", v4),
}

EMBEDDED = [
    pytest.param(wrap(v4), v4, form, kind, id=f"{form}-{kind}") for form, wrap in WRAPPINGS.items() for kind, v4 in REFUSED_V4.items()
]

BARE = [
    *[pytest.param(v4, kind, id=f"v4-{kind}") for kind, v4 in REFUSED_V4.items()],
    pytest.param("::1", "loopback", id="v6-loopback"),
    pytest.param("::", "unspecified", id="v6-unspecified"),
    pytest.param("fe80::1", "link-local", id="v6-link-local"),
    pytest.param("ff02::1", "multicast", id="v6-multicast"),
    pytest.param("fec0::1", "site-local (private)", id="v6-site-local"),
    pytest.param("fd12:3456::1", "unique-local (private)", id="v6-unique-local"),
    pytest.param("2001:db8::1", "private", id="v6-documentation"),
    pytest.param("64:ff9b:1::808:808", "local-use NAT64 (private)", id="local-use-NAT64-of-a-public-address"),
    pytest.param(_teredo("8.8.8.8", "8.8.4.4"), "private", id="Teredo-of-public-addresses"),
]

PUBLIC = ["8.8.8.8", "2606:4700::1111", "64:ff9b::808:808", "::ffff:8.8.8.8", "2002:808:808::1", "93.184.215.14"]


def _article(kind: str) -> str:
    return "an" if kind == "unspecified" else "a"


def _url(address: str) -> str:
    return f"http://[{address}]/hook" if ":" in address else f"http://{address}/hook"


def _expected_embedding(address: str, v4: str, form: str, kind: str) -> str:
    if ipaddress.ip_address(address).is_unspecified:  # the IPv4-compatible form of 0.0.0.0 is the unspecified address itself
        return f"{address} is an unspecified address"
    return f"{address} embeds {v4} ({form}), {_article(kind)} {kind} address (allowed only with TURNLOG_WEBHOOK_ALLOW_PRIVATE)"


@pytest.fixture
def dns(monkeypatch):
    """A fake resolver for names under example.test: `dns["hooks.example.test"] = "64:ff9b::127.0.0.1"`. Other names (and
    IP literals) resolve for real."""
    answers: dict[str, str] = {}
    real = socket.getaddrinfo

    def getaddrinfo(host, port, *args, **kwargs):
        if host in answers:
            address = answers[host]
            family = socket.AF_INET6 if ":" in address else socket.AF_INET
            sockaddr = (address, port, 0, 0) if family == socket.AF_INET6 else (address, port)
            return [(family, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", sockaddr)]
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return answers


@pytest.fixture
def connections(monkeypatch):
    """The TCP connections the guarded client goes on to make (none is made: each is recorded, then fails)."""
    made: list[tuple[str, int]] = []

    def connect_tcp(self, host, port, **kwargs):
        made.append((host, port))
        raise httpcore.ConnectError("not connecting in tests")

    monkeypatch.setattr(httpcore.SyncBackend, "connect_tcp", connect_tcp)
    return made


@pytest.mark.parametrize(("address", "v4", "form", "kind"), EMBEDDED)
def test_an_address_embedding_a_refused_one_is_refused_when_saved(settings, address, v4, form, kind):
    settings.TURNLOG_WEBHOOK_ALLOW_PRIVATE = False
    expected = _expected_embedding(address, v4, form, kind)
    assert expected in refusal_for_url(_url(address))
    with pytest.raises(notify.EndpointRefused) as refused:
        notify.create_endpoint(project=Project.default(), actor=None, url=_url(address))
    assert refused.value.field == "url" and expected in refused.value.why and not WebhookEndpoint.objects.exists()


@pytest.mark.parametrize(("address", "kind"), BARE)
def test_a_refused_address_is_refused_when_saved_saying_why(settings, address, kind):
    settings.TURNLOG_WEBHOOK_ALLOW_PRIVATE = False
    assert refusal_for_url(_url(address)) == f"{address} is {_article(kind)} {kind} address (allowed only with TURNLOG_WEBHOOK_ALLOW_PRIVATE)"


@pytest.mark.parametrize(("address", "v4", "form", "kind"), EMBEDDED)
def test_a_name_resolving_to_an_embedding_address_is_refused_at_connect(settings, dns, connections, address, v4, form, kind):
    settings.TURNLOG_WEBHOOK_ALLOW_PRIVATE = False
    dns["hooks.example.test"] = address
    with addresses.client() as client, pytest.raises(httpx.ConnectError) as refused:
        client.post("http://hooks.example.test/hook", content=b"{}")
    assert f"refused: hooks.example.test resolves to {_expected_embedding(address, v4, form, kind)}" in str(refused.value)
    assert connections == []


@pytest.mark.parametrize(("address", "kind"), BARE)
def test_a_name_resolving_to_a_refused_address_is_refused_at_connect(settings, dns, connections, address, kind):
    settings.TURNLOG_WEBHOOK_ALLOW_PRIVATE = False
    dns["hooks.example.test"] = address
    with addresses.client() as client, pytest.raises(httpx.ConnectError) as refused:
        client.post("http://hooks.example.test/hook", content=b"{}")
    assert f"refused: hooks.example.test resolves to {address} is " in str(refused.value) and kind in str(refused.value)
    assert connections == []


@pytest.mark.parametrize("address", PUBLIC)
def test_public_addresses_pass_when_saved_and_are_connected_to(settings, dns, connections, address):
    settings.TURNLOG_WEBHOOK_ALLOW_PRIVATE = False
    assert refusal_for_url(_url(address)) is None
    dns["hooks.example.test"] = address
    with addresses.client() as client, pytest.raises(httpx.ConnectError, match="not connecting in tests"):
        client.post("http://hooks.example.test/hook", content=b"{}")
    assert connections == [(address, 80)]  # the very address checked


@pytest.mark.parametrize("address", ["64:ff9b::127.0.0.1", "::ffff:127.0.0.1", "2002:a9fe:a9fe::1"])
def test_the_setting_that_allows_private_addresses_allows_the_embedding_forms(settings, dns, connections, address):
    settings.TURNLOG_WEBHOOK_ALLOW_PRIVATE = True
    assert refusal_for_url(_url(address)) is None
    dns["hooks.example.test"] = address
    with addresses.client() as client, pytest.raises(httpx.ConnectError, match="not connecting in tests"):
        client.post("http://hooks.example.test/hook", content=b"{}")
    assert connections == [(address, 80)]


def test_a_name_that_moves_to_an_embedded_loopback_after_saving_is_refused_at_delivery(receiver, settings, dns):
    """Saved while it resolved to a public address; by delivery it resolves to the IPv4-mapped form of the receiver's own
    loopback address, which a plain connection would reach. Nothing arrives, and the attempt says why."""
    settings.TURNLOG_WEBHOOK_ALLOW_PRIVATE = False
    dns["hooks.example.test"] = "93.184.215.14"
    port = urlsplit(receiver.url).port
    hook = notify.create_endpoint(project=Project.default(), actor=None, url=f"http://hooks.example.test:{port}/hook")
    session = crashed("crash-rebind")
    worker.run_round(now=stalled_clock(session))
    dns["hooks.example.test"] = "::ffff:127.0.0.1"

    [sent] = worker.deliver_webhooks(now=stalled_clock(session))

    assert sent.outcome == "retry" and receiver.received == []
    attempt = DeliveryAttempt.objects.get(delivery__endpoint=hook)
    assert "refused: hooks.example.test resolves to ::ffff:127.0.0.1 embeds 127.0.0.1 (IPv4-mapped), a loopback address" in attempt.error
