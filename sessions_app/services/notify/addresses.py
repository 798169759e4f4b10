"""Where webhooks may go: never to loopback, link-local or private addresses unless the site allows them
(TURNLOG_WEBHOOK_ALLOW_PRIVATE), checked when an endpoint is saved and again at every connection, on the
very address connected to (a name that resolves elsewhere later gains nothing). No redirect is followed."""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

import httpcore
import httpx
from django.conf import settings


class AddressRefused(httpcore.ConnectError):
    """A connection refused before it was made (httpx reports it as a ConnectError with this text)."""


def address_refusal(address: str) -> str | None:
    """Why an IP address is refused, or None when it is a public one (or private ones are allowed)."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if settings.TURNLOG_WEBHOOK_ALLOW_PRIVATE or ip.is_global:
        return None
    kind = "loopback" if ip.is_loopback else "link-local" if ip.is_link_local else "private or reserved"
    return f"{address} is a {kind} address (allowed only with TURNLOG_WEBHOOK_ALLOW_PRIVATE)"


def resolve(host: str, port: int) -> list[str]:
    """The addresses a host name resolves to (an IP literal: itself); OSError when it resolves to none."""
    return list(dict.fromkeys(info[4][0] for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)))


def url_refusal(url: str) -> str | None:
    """Why a webhook URL is refused now (scheme, no host, a name that does not resolve, a refused address), or None."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "use an http:// or https:// URL with a host"
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
        addresses = resolve(parts.hostname, port)
    except ValueError:
        return "the port is not a number from 0 to 65535"
    except OSError as error:
        return f"{parts.hostname} does not resolve ({error.strerror or error})"
    refusals = [why for address in addresses if (why := address_refusal(address))]
    if not refusals:
        return None
    return refusals[0] if [parts.hostname] == addresses else f"{parts.hostname} resolves to {refusals[0]}"


class GuardedBackend(httpcore.SyncBackend):
    """Resolves the host itself, refuses it if any of its addresses is refused, and connects to the address checked."""

    def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        try:
            addresses = resolve(host, port)
        except OSError as error:
            raise httpcore.ConnectError(f"{host} does not resolve: {error}") from error
        for address in addresses:
            if why := address_refusal(address):
                raise AddressRefused(f"refused: {why}" if [host] == addresses else f"refused: {host} resolves to {why}")
        return super().connect_tcp(addresses[0], port, timeout=timeout, local_address=local_address, socket_options=socket_options)


class GuardedTransport(httpx.HTTPTransport):
    def __init__(self) -> None:
        super().__init__(trust_env=False)
        # httpx takes no network backend; its pool does. TLS still names the URL's host (SNI, certificate).
        self._pool = httpcore.ConnectionPool(ssl_context=httpx.create_ssl_context(), network_backend=GuardedBackend(), max_connections=20)


def client(timeout: float | None = None) -> httpx.Client:
    """The webhook sender's HTTP client (and the reconcilers', with their own timeout): the guarded transport,
    no proxies from the environment, no redirects."""
    timeout = settings.TURNLOG_WEBHOOK_TIMEOUT_SECONDS if timeout is None else timeout
    return httpx.Client(transport=GuardedTransport(), trust_env=False, follow_redirects=False, timeout=timeout)
