"""The client guide's examples (docs/guide/python-client.md) run, as printed, against a live Daphne."""

from __future__ import annotations

import re

import pytest

from turnlog_client.tests.conftest import ROOT, events_of, run_script
from turnlog_client.tests.histories import write_crashed_session

pytestmark = pytest.mark.django_db(transaction=True)  # the server reads what the test commits


def guide_example(title: str = "Write a session") -> str:
    section = (ROOT / "docs" / "guide" / "python-client.md").read_text().split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]
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


def test_the_guides_resume_example_recovers_a_crashed_session_and_continues_it_in_an_agent(server, client, operator_token, monkeypatch):
    session_id = write_crashed_session(client)
    monkeypatch.setenv("TURNLOG_URL", server.url)
    monkeypatch.setenv("TURNLOG_TOKEN", operator_token)
    monkeypatch.setenv("MODEL", "test")  # Pydantic AI's TestModel: no model provider needed
    process = run_script(guide_example("Resume an agent after a crash"), session_id)
    assert process.wait(timeout=60) == 0, process.stderr.read()
    lines = process.stdout.read().splitlines()
    assert [line.split()[0] for line in lines[:-1]] == ["system", "user", "user", "assistant", "tool", "tool", "system"]
    assert lines[-1]  # after the recovery context message, the agent's answer
    assert not client.get_session(session_id)["interrupted"]
