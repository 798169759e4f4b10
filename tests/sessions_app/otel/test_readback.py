"""What OTLP ingest accepted reads back on every page and endpoint of its session: content off
(no content at all), bytes, markup and an error result, on both backends (never a 5xx, always escaped)."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from sessions_app import services
from sessions_app.models import Project
from sessions_app.otel.readings import MODEL, TOOL, Message, Reading
from sessions_app.selectors import access
from tests.access import member

T, ROOT = "a" * 32, "0000000000000001"


@pytest.mark.django_db
def test_an_otlp_session_with_hostile_and_missing_content_reads_back_everywhere(client):
    user = get_user_model().objects.create_user("viewer", password="pw")
    member(user, project=Project.default())
    readings = [
        Reading(MODEL, T, "a000000000000001", ROOT, "chat m", start_ns=10, end_ns=20, conversation_id="c-hostile",
                output_messages=(Message("assistant", "<script>alert(1)</script>", ({"id": "c1", "name": "<b>x</b>", "arguments": {"k": b"\x00\xff"}},)),),
                usage={"input_tokens": 3, "model": "m"}),
        Reading(TOOL, T, "b000000000000001", ROOT, "execute_tool x", start_ns=30, end_ns=40, conversation_id="c-hostile",
                tool_name="<b>x</b>", tool_call_id="c1", has_result=True, error={"type": "ValueError", "message": "<i>bad</i>"}),
        Reading(MODEL, T, "a000000000000002", ROOT, "chat m", start_ns=50, end_ns=60, conversation_id="c-hostile"),
    ]  # fmt: skip
    result = services.otlp.ingest_readings(actor=access.Actor(user=user), project=Project.default(), readings=readings)
    assert result.refused == []
    client.force_login(user)
    for path in ["/", "/sessions/c-hostile/", "/sessions/c-hostile/recovery", "/sessions/c-hostile/lineage",
                 "/api/v1/sessions/c-hostile", "/api/v1/sessions/c-hostile/events", "/api/v1/sessions/c-hostile/messages",
                 "/api/v1/sessions/c-hostile/recovery-plan", "/api/v1/sessions/c-hostile/export"]:  # fmt: skip
        answer = client.get(path)
        assert answer.status_code == 200, (path, answer.status_code)
        if answer["Content-Type"].startswith("text/html"):  # pages escape what agents wrote; JSON carries it as given
            assert b"<script>alert(1)</script>" not in answer.content and b"<i>bad</i>" not in answer.content
    events = client.get("/api/v1/sessions/c-hostile/events").json()["events"]
    (message,) = [e for e in events if e["type"] == "assistant_message"]
    assert message["data"]["tool_calls"][0]["arguments"] == {"k": "AP8="}
