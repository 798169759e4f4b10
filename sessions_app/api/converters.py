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


register_converter(SessionIdConverter, "session_id")
register_converter(SeqConverter, "seq")
