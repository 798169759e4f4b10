"""A forged keyset cursor is refused in words (422 in the API, 400 on a page), never a 500: too deep
to read, a time out of range in UTC or without a zone, an id no row can have."""

from __future__ import annotations

import base64
from datetime import UTC, datetime

import pytest

from sessions_app.lib import cursors
from sessions_app.models import AuditEntry, Project

pytestmark = pytest.mark.django_db


def b64(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


FORGED = {
    "nested past the reader": b64("[" * 3000 + "]" * 3000),
    "year 1 before UTC": b64('["0001-01-01T00:00:00+01:00", 1]'),
    "year 9999 after UTC": b64('["9999-12-31T23:59:59-01:00", 1]'),
    "no zone": b64('["2026-01-01T00:00:00", 1]'),
    "NUL in the id": b64('["2026-01-01T00:00:00Z", "a\\u0000b"]'),
    "id past 64 bits": b64('["2026-01-01T00:00:00Z", ' + "9" * 30 + "]"),
    "negative id past 64 bits": b64('["2026-01-01T00:00:00Z", -' + "9" * 30 + "]"),
    "1e400": b64('["2026-01-01T00:00:00Z", 1e400]'),
    "lone surrogate": b64('["2026-01-01T00:00:00Z", "\\ud800"]'),
    "an object": b64('{"a": 1, "b": 2}'),
    "a list id": b64('["2026-01-01T00:00:00Z", [1]]'),
    "a bool id": b64('["2026-01-01T00:00:00Z", true]'),
    "not UTF-8": base64.urlsafe_b64encode(b"\xff\xfe").decode(),
    "not base64": "%%%",
}


@pytest.mark.parametrize("kind", [str, int])
@pytest.mark.parametrize("cursor", FORGED.values(), ids=FORGED.keys())
def test_decode_refuses_what_encode_never_wrote(cursor, kind):
    with pytest.raises(cursors.InvalidCursor):
        cursors.decode(cursor, id_kind=kind, given_by="this gave")


@pytest.mark.parametrize("row_id", ["s-1.a:b_c", 0, 2**63 - 1])
def test_decode_reads_what_encode_wrote(row_id):
    moment = datetime(2026, 12, 4, 15, 0, 0, 123456, tzinfo=UTC)
    assert cursors.decode(cursors.encode(moment, row_id), id_kind=type(row_id), given_by="this gave") == (moment, row_id)


@pytest.mark.parametrize("cursor", FORGED.values(), ids=FORGED.keys())
def test_every_cursor_parameter_refuses_a_forged_cursor(cursor, api, admin_client):
    assert api.post("/api/v1/sessions", {"id": "s1", "agent_name": "bot"}).status_code == 201
    project = Project.objects.get()
    AuditEntry.objects.create(project=project, actor_name="x", action=AuditEntry.ACTIONS[0][0])
    response = api.get("/api/v1/sessions", {"cursor": cursor})
    assert response.status_code == 422 and response.json()["error"] == "invalid_cursor", response.content
    for path, query in [("/", {"cursor": cursor}), (f"/projects/{project.slug}/audit", {"cursor": cursor}), ("/agents/agent", {"name": "bot", "before": cursor})]:
        response = admin_client.get(path, query)
        assert response.status_code == 400, (path, response.status_code)
        assert "is not one" in response.content.decode()
