"""Numbers in query strings and forms, the same way for pages, forms and sockets.

Every numeric parameter a page, form or socket reads goes through
`decimal_int` with its name (tests/dashboard/test_request_input.py finds
them all): text that is not ASCII digits is no number (the caller's
default, or its own refusal), and a number too long to convert is a
`BadParameter`, answered 400 (dashboard.middleware.BadParameterMiddleware)
or closed 4400 (the sockets), naming the parameter.
"""

from __future__ import annotations

import re

DECIMAL = re.compile(r"[0-9]+")
# Python's default int-str conversion limit (sys.int_info.default_max_str_digits): int() of a
# longer string raises ValueError, and the API (pydantic) refuses such a number as well.
MAX_DIGITS = 4300


class BadParameter(ValueError):
    """A numeric parameter too long to be a number the server can read."""

    def __init__(self, name: str, text: str):
        super().__init__(f"{name} must be a number of at most {MAX_DIGITS:,} digits; it has {len(text):,}")
        self.name = name


def decimal_int(text: str, *, name: str) -> int | None:
    """The integer >= 0 that `text`, the value of parameter `name`, spells in ASCII digits, else None;
    BadParameter when it has more than MAX_DIGITS digits.

    Not `str.isdigit()`: "²" and other Unicode digits pass it, and `int()`
    then refuses them (a 500 where a 4xx or the default belongs).
    """
    if not DECIMAL.fullmatch(text):
        return None
    if len(text) > MAX_DIGITS:
        raise BadParameter(name, text)
    return int(text)
