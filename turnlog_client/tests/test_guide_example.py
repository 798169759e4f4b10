"""The client guide's example (docs/guide/python-client.md) runs, as printed, against a live Daphne."""

from __future__ import annotations

import re

import pytest

from turnlog_client.tests.conftest import ROOT, events_of, run_script

pytestmark = pytest.mark.django_db(transaction=True)  # the server reads what the test commits


def guide_example() -> str:
    section = (ROOT / "docs" / "guide" / "python-client.md").read_text().split("## Write a session\n", 1)[1].split("\n## ", 1)[0]
    (code,) = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
    return code


def test_the_guides_client_example_runs_and_writes_a_clean_session(server, token, client, monkeypatch):
    code = guide_example()
    assert len(code.strip().splitlines()) <= 20
    monkeypatch.setenv("TURNLOG_URL", server.url)
    monkeypatch.setenv("TURNLOG_TOKEN", token)
    process = run_script(code)
    assert process.wait(timeout=60) == 0, process.stderr.read()
    session_id, interrupted = process.stdout.read().split()
    assert interrupted == "False"
    assert client.get_session(session_id)["agent_name"] == "billing-bot"
    assert [e["type"] for e in events_of(client, session_id)] == [
        "user_message", "turn_start", "step_start", "assistant_message", "tool_call", "tool_result", "step_end",
        "step_start", "assistant_message", "step_end", "turn_end",
    ]  # fmt: skip
