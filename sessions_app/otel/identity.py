"""Which session a run's spans go to: the conversation's id, made a valid session id when it is not one."""

from __future__ import annotations

import hashlib
import re

# api.md: session ids are 1 to 128 characters of A-Z a-z 0-9 . _ : -
VALID_SESSION_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
_INVALID_RUN = re.compile(r"[^A-Za-z0-9._:-]+")
PREFIX_MAX = 80


def session_id_for(value: str) -> tuple[str, str | None]:
    """(session id, the original value when it had to be mapped, else None).

    A valid id is used as it is (conversation `c-42` is session `c-42`).
    Another value maps deterministically to a readable prefix (its valid
    characters, runs of others as `-`) plus a digest of the whole value, so
    two conversations never share a session and the same one always finds
    its own.
    """
    if VALID_SESSION_ID.fullmatch(value):
        return value, None
    prefix = _INVALID_RUN.sub("-", value).strip("-")[:PREFIX_MAX] or "otel"
    digest = hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:24]
    return f"{prefix}-{digest}", value
