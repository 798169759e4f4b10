"""Where in a request a problem is, named as the client sent it (api.md, "What a request may hold").

django-ninja locates a validation error by its own parameters: ["body", "payload",
"events", 0, "data"] for the append's body, ["query", "limit"] for a query value.
A client sent `events[0].data` and `limit`: that is the location an answer gives.
"""

from __future__ import annotations

from collections.abc import Sequence

# django-ninja's sources of a parameter; a body schema parameter's own name follows "body".
SOURCES = frozenset({"query", "path", "header", "cookie", "form", "file"})
BODY_PARAMETER = "payload"  # every endpoint's body schema parameter (tests.sessions_app.test_field_paths checks)


def client_loc(loc: Sequence[str | int]) -> list[str | int]:
    """A ninja/pydantic `loc` as the client's path: the source and the view's parameter name dropped."""
    parts = list(loc)
    if parts[:1] == ["body"]:
        parts = parts[2:] if parts[1:2] == [BODY_PARAMETER] else parts[1:]
    elif parts[:1] and parts[0] in SOURCES:
        parts = parts[1:]
    return parts


def dotted(loc: Sequence[str | int]) -> str:
    """["events", 0, "data"] as `events[0].data`; the empty path (the whole body) as `body`."""
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "body"
