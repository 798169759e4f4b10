"""Where webhooks and reconcilers may go: never to an address that is, or embeds, a loopback, private, link-local,
multicast, reserved or unspecified one, unless the site allows them (TURNLOG_WEBHOOK_ALLOW_PRIVATE). Checked when an
endpoint or check URL is saved (refusal_for_url) and again at every connection (client()), on the very address connected
to (a name that resolves elsewhere later gains nothing). No redirect is followed.

IPv6 forms that carry an IPv4 address are judged by that address: IPv4-mapped ::ffff:0:0/96, IPv4-compatible ::/96,
NAT64 64:ff9b::/96 and the local-use 64:ff9b:1::/48 (last 32 bits), 6to4 2002::/16 (bits 16..47), Teredo 2001::/32
(server bits 32..63, client the inverted last 32 bits)."""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

import httpcore
import httpx
from django.conf import settings

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_V4_COMPATIBLE = ipaddress.IPv6Network("::/96")
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.IPv6Network("64:ff9b:1::/48")
_SITE_LOCAL = ipaddress.IPv6Network("fec0::/10")
_UNIQUE_LOCAL = ipaddress.IPv6Network("fc00::/7")
_ALLOWED_ONLY_WITH = "allowed only with TURNLOG_WEBHOOK_ALLOW_PRIVATE"


class AddressRefused(httpcore.ConnectError):
    """A connection refused before it was made (httpx reports it as a ConnectError with this text)."""


def _kind(ip: IPAddress) -> str | None:
    """What makes a bare address (its own bits, nothing unwrapped) non-public, or None when it is public.
    Python's ipaddress properties decide, plus the IPv6 site-local and unique-local ranges (private whatever the version says)."""
    if ip.is_unspecified:
        return "an unspecified"
    if ip.is_loopback:
        return "a loopback"
    if ip.is_link_local:
        return "a link-local"
    if ip.is_multicast:
        return "a multicast"
    if isinstance(ip, ipaddress.IPv6Address) and ip in _SITE_LOCAL:
        return "a site-local (private)"
    if isinstance(ip, ipaddress.IPv6Address) and ip in _UNIQUE_LOCAL:
        return "a unique-local (private)"
    if ip.is_reserved:  # before private: 240.0.0.0/4 is both, and "reserved" says more
        return "a reserved"
    if ip.is_private:
        return "a private"
    if not ip.is_global:
        return "a non-public"
    return None


def embedded(ip: IPAddress) -> list[tuple[str, ipaddress.IPv4Address]]:
    """The IPv4 addresses an IPv6 address carries, each with the name of the form carrying it (none for plain addresses)."""
    if not isinstance(ip, ipaddress.IPv6Address):
        return []
    last32 = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip.ipv4_mapped is not None:
        return [("IPv4-mapped", ip.ipv4_mapped)]
    if ip in _V4_COMPATIBLE:
        return [("IPv4-compatible", last32)]
    if ip in _NAT64:
        return [("NAT64", last32)]
    if ip in _NAT64_LOCAL:
        return [("local-use NAT64", last32)]
    if ip.sixtofour is not None:
        return [("6to4", ip.sixtofour)]
    if ip.teredo is not None:
        server, client = ip.teredo
        return [("Teredo server", server), ("Teredo client", client)]
    return []


def _own_bits_decide(ip: IPAddress) -> bool:
    """Whether the wrapper's own bits count besides what it embeds. The forms inside ::/8 (mapped, compatible, NAT64) are
    all 'reserved' to ipaddress, which would refuse the NAT64 form of a public address; they are judged by what they carry
    alone. The local-use NAT64 prefix is for one site only (RFC 8215), so it counts as private whatever it carries."""
    return not (ip.ipv4_mapped is not None or ip in _V4_COMPATIBLE or ip in _NAT64) if isinstance(ip, ipaddress.IPv6Address) else True


def address_refusal(address: str) -> str | None:
    """Why an IP address is refused, naming it (and what it embeds) and why, or None when it is a public one (or the site
    allows non-public ones)."""
    if settings.TURNLOG_WEBHOOK_ALLOW_PRIVATE:
        return None
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if ip.is_unspecified or ip.is_loopback:  # ::1 and :: are themselves, not IPv4-compatible forms of 0.0.0.x
        return f"{address} is {_kind(ip)} address ({_ALLOWED_ONLY_WITH})"
    for form, inner in embedded(ip):
        if kind := _kind(inner):
            return f"{address} embeds {inner} ({form}), {kind} address ({_ALLOWED_ONLY_WITH})"
    if isinstance(ip, ipaddress.IPv6Address) and ip in _NAT64_LOCAL:
        return f"{address} is a local-use NAT64 (private) address ({_ALLOWED_ONLY_WITH})"
    if _own_bits_decide(ip) and (kind := _kind(ip)):
        return f"{address} is {kind} address ({_ALLOWED_ONLY_WITH})"
    return None


def resolve(host: str, port: int) -> list[str]:
    """The addresses a host name resolves to (an IP literal: itself); OSError when it resolves to none."""
    return list(dict.fromkeys(info[4][0] for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)))


def _is_itself(host: str, addresses: list[str]) -> bool:
    """Whether `host` is an IP literal that resolved to just itself (its message need not say 'resolves to')."""
    try:
        return [ipaddress.ip_address(host.split("%", 1)[0])] == [ipaddress.ip_address(a.split("%", 1)[0]) for a in addresses]
    except ValueError:
        return False


def _refusal_of(host: str, addresses: list[str]) -> str | None:
    """Why a host is refused, given what it resolved to: an IP literal named as written, a name with the address refused."""
    if _is_itself(host, addresses):
        return address_refusal(host)
    for address in addresses:
        if why := address_refusal(address):
            return f"{host} resolves to {why}"
    return None


def refusal_for_url(url: str) -> str | None:
    """Why a webhook's or a reconciler's URL is refused now (scheme, no host, a bad port, a name that does not resolve, an
    address refused), or None. Call it when the URL is saved; client() checks again at each connection."""
    try:
        parts = urlsplit(url)
    except ValueError:  # an unclosed or malformed [IPv6] host
        return "the host is not a name or an address (an IPv6 address is written in brackets, as http://[2001:db8::1]/)"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "use an http:// or https:// URL with a host"
    try:
        port = parts.port
    except ValueError:
        port = 0
    if port == 0:  # port 0 cannot be connected to ("or 443" would have checked another port than the one saved)
        return "the port is not a number from 1 to 65535"
    port = port or (443 if parts.scheme == "https" else 80)
    try:
        addresses = resolve(parts.hostname, port)
    except UnicodeError:  # IDNA refuses the name: an empty label (a..b) or one over 63 characters
        return f"{parts.hostname} is not a host name"
    except OSError as error:
        return f"{parts.hostname} does not resolve ({error.strerror or error})"
    return _refusal_of(parts.hostname, addresses)


url_refusal = refusal_for_url  # the name webhooks used first


class GuardedBackend(httpcore.SyncBackend):
    """Resolves the host itself, refuses it if any of its addresses is refused, and connects to the address checked."""

    def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        try:
            addresses = resolve(host, port)
        except OSError as error:
            raise httpcore.ConnectError(f"{host} does not resolve: {error}") from error
        if why := _refusal_of(host, addresses):
            raise AddressRefused(f"refused: {why}")
        return super().connect_tcp(addresses[0], port, timeout=timeout, local_address=local_address, socket_options=socket_options)


class GuardedTransport(httpx.HTTPTransport):
    def __init__(self) -> None:
        super().__init__(trust_env=False)
        # httpx takes no network backend; its pool does. TLS still names the URL's host (SNI, certificate).
        self._pool = httpcore.ConnectionPool(ssl_context=httpx.create_ssl_context(), network_backend=GuardedBackend(), max_connections=20)


def client(timeout: float | None = None) -> httpx.Client:
    """The HTTP client for webhooks and reconcilers: every connection checked (address_refusal), no proxies from the
    environment, no redirects. `timeout` defaults to TURNLOG_WEBHOOK_TIMEOUT_SECONDS."""
    timeout = settings.TURNLOG_WEBHOOK_TIMEOUT_SECONDS if timeout is None else timeout
    return httpx.Client(transport=GuardedTransport(), trust_env=False, follow_redirects=False, timeout=timeout)
