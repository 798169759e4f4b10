"""Numbers in query strings, the same way for pages and sockets."""

from __future__ import annotations

import re

DECIMAL = re.compile(r"[0-9]+")


def decimal_int(text: str) -> int | None:
    """The integer >= 0 that `text` spells in ASCII digits, else None.

    Not `str.isdigit()`: "²" and other Unicode digits pass it, and `int()`
    then refuses them (a 500 where a 4xx or the default belongs).
    """
    return int(text) if DECIMAL.fullmatch(text) else None
