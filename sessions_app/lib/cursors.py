"""Keyset cursors: a page's last (time, id) as URL-safe base64 JSON, and reading one back from a client.

A cursor comes back in a query string, so it is untrusted: anything that is not
a pair this module could have written (too deep, a time out of range in UTC or
without a zone, an id no row can have) is InvalidCursor, never a database error.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from datetime import datetime

from sessions_app.log import events as log_events
from sessions_app.log import values as log_values

ROW_ID_MAX = 2**63 - 1  # a 64-bit primary key (SQLite's INTEGER, PostgreSQL's bigint)
SESSION_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")  # models.SESSION_ID_PATTERN


class InvalidCursor(ValueError):
    pass


def encode(moment: datetime, row_id: str | int) -> str:
    raw = json.dumps([moment.isoformat(), row_id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode(cursor: str, *, id_kind: type[str] | type[int], given_by: str) -> tuple[datetime, str | int]:
    """(time, id) from a cursor `encode` wrote, the id a session id (str) or a row's pk (int)."""
    try:
        pair = log_values.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        moment, row_id = pair  # a list of two, else ValueError or TypeError
        moment = log_events.parse_time(moment)  # aware, and representable in UTC
        if isinstance(pair, dict) or not _is_id(row_id, id_kind):
            raise ValueError("not an id")
    except (ValueError, TypeError, binascii.Error) as exc:
        raise InvalidCursor(f"cursor {log_events.show_json(cursor)} is not one {given_by}") from exc
    return moment, row_id


def _is_id(value: object, id_kind: type) -> bool:
    if id_kind is int:
        return log_events.is_integer(value) and 0 <= value <= ROW_ID_MAX
    return isinstance(value, str) and SESSION_ID.fullmatch(value) is not None


def encode_sorted(sort: str, key: str | int, moment: datetime, row_id: str | int) -> str:
    """A cursor of a list sorted by `sort` (a column's value `key`, ties by (time, id)): the sort is named in it,
    so a cursor of one order given to another is refused rather than read as a wrong place."""
    raw = json.dumps([sort, key, moment.isoformat(), row_id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_sorted(cursor: str, *, sort: str, key_kind: type[str] | type[int], id_kind: type[str] | type[int], given_by: str):
    """(key, time, id) from a cursor `encode_sorted` wrote for `sort`; the key a decimal string (str) or an integer."""
    try:
        parts = log_values.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        if not isinstance(parts, list) or len(parts) != 4 or parts[0] != sort:
            raise ValueError("not a cursor of this order")
        _, key, moment, row_id = parts
        moment = log_events.parse_time(moment)
        if not _is_id(row_id, id_kind) or not _is_key(key, key_kind):
            raise ValueError("not a key and id")
    except (ValueError, TypeError, binascii.Error) as exc:
        raise InvalidCursor(f"cursor {log_events.show_json(cursor)} is not one {given_by} for this order") from exc
    return key, moment, row_id


DECIMAL_KEY = re.compile(r"-?[0-9]{1,20}(\.[0-9]{1,12})?")


def _is_key(value: object, key_kind: type) -> bool:
    if key_kind is int:
        return log_events.is_integer(value) and -ROW_ID_MAX <= value <= ROW_ID_MAX
    return isinstance(value, str) and DECIMAL_KEY.fullmatch(value) is not None
