"""URL path converters: an id or seq that cannot exist is a 404 at routing, never a query.

A session id holding "/" (sent as %2F), NUL or any other character outside
the id alphabet matches no route; so does a seq too long for a 64-bit column.
"""

from django.urls import register_converter

from sessions_app.models import SESSION_ID_PATTERN


class SessionIdConverter:
    regex = SESSION_ID_PATTERN.removeprefix("^").removesuffix("$")

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value


class SeqConverter:
    regex = "[0-9]{1,18}"  # below 2**63: every seq column holds it

    def to_python(self, value: str) -> int:
        return int(value)

    def to_url(self, value: int) -> str:
        return str(value)


class CallIdConverter:
    """A call id: any text, sent percent-encoded as one segment (`a%2Fverdict`). Django matches the
    decoded path, so an id may hold "/": the action after it is always the path's last segment,
    and the id is everything between "calls/" and that segment. NUL matches no route."""

    regex = "[^\x00]+"

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value


register_converter(SessionIdConverter, "session_id")
register_converter(CallIdConverter, "call_id")
register_converter(SeqConverter, "seq")
