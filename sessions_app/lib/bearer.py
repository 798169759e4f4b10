"""The one reading of `Authorization: Bearer <token>` that every door shares (the API and its fast
lanes, the OTLP endpoint, /metrics, the websockets): a token one door takes, every door takes."""

from __future__ import annotations

SCHEME = "bearer"


def bearer_secret(authorization: str | None) -> str | None:
    """The token in an Authorization header's value, or None when it holds no bearer token.

    The scheme is case-insensitive (RFC 9110, 11.1); blanks around the token are not part of it.
    """
    if not authorization:
        return None
    scheme, _, secret = authorization.strip().partition(" ")
    if scheme.lower() != SCHEME:
        return None
    return secret.strip() or None
