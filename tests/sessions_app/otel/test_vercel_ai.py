"""Real Vercel AI SDK agents in: tests/js/agent.mjs runs `ai` (version 7 with @ai-sdk/otel's default
integration or its LegacyOpenTelemetry, version 6 from tests/js/ai6) on a fake model, traced by the
OpenTelemetry JS SDK and exported over OTLP/HTTP (protobuf or JSON) to a live Daphne. A finished run reads
back as one turn whose calls are all answered; a run killed inside a tool reads as docs/guide/otlp.md says
("Vercel AI SDK"): with the guide's pending-span processor its call is owed as outcome unknown.

Node and tests/js's node_modules (`make test` runs npm ci) are needed: without them these tests fail."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import load_factor
from tests.sessions_app.otel.conftest import SETTLE, STALL
from tests.sessions_app.otel.test_pydantic_ai import api, closed, events, wait_for

JS = Path(__file__).resolve().parents[2] / "js"
AGENT = JS / "agent.mjs"


def node() -> str:
    found = shutil.which("node")
    assert found, "node is not installed: the Vercel AI SDK tests need Node.js 20+"
    for modules in (JS / "node_modules", JS / "ai6" / "node_modules"):
        assert modules.is_dir(), f"{modules} is missing: `make test` (or npm ci in {modules.parent}) installs it"
    return found


def command(server, token, conversation: str, *options: str) -> list[str]:
    return [node(), str(AGENT), server.url, token, conversation, *options]


def run_agent(server, token, conversation: str, *options: str) -> None:
    done = subprocess.run(command(server, token, conversation, *options), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def sessions(server, token) -> list[str]:
    return [item["id"] for item in api(server, token, "/sessions?limit=100")["items"]]


SDKS = [("v7", "protobuf"), ("v7", "json"), ("v7-legacy", "protobuf"), ("v7-legacy", "json"), ("v6", "protobuf"), ("v6", "json")]


@pytest.mark.parametrize(("sdk", "encoding"), SDKS, ids=[f"{sdk}-{encoding}" for sdk, encoding in SDKS])
@pytest.mark.parametrize("stream", [False, True], ids=["generateText", "streamText"])
def test_a_finished_run_reads_back_as_one_turn_whose_calls_are_all_answered(server, token, sdk, encoding, stream):
    run_agent(server, token, "v-42", "--sdk", sdk, "--encoding", encoding, *(["--stream"] if stream else []))
    log = wait_for(lambda: closed(server, token, "v-42"), what="the turn closed after the settle time")
    types = [e["type"] for e in log]
    assert types.count("turn_start") == types.count("turn_end") == 1
    assert types.count("step_start") == types.count("step_end") == 2
    assert log[-1]["data"]["reason"] == "complete"
    calls = sorted(e["data"]["id"] for e in log if e["type"] == "tool_call")
    results = {e["data"]["tool_call_id"]: e["data"]["content"] for e in log if e["type"] == "tool_result"}
    assert calls == sorted(results) == ["call_a1", "call_a2"]
    # Two batches of the run may be in flight at once and the spans are written as they arrive: the order
    # of the assistant messages may differ (seen on a loaded machine), never what they say.
    assistant = sorted((e for e in log if e["type"] == "assistant_message"), key=lambda e: e["data"]["metadata"]["usage"]["input_tokens"])
    assert [m["data"]["metadata"]["usage"]["input_tokens"] for m in assistant] == [30, 60]
    assert [c["id"] for c in assistant[0]["data"]["tool_calls"]] == ["call_a1", "call_a2"]
    assert [m["data"]["content"] for m in assistant] == ["Let me refund them.", "Both orders are refunded."]
    assert any(e["type"] == "user_message" and e["data"]["content"] == "Refund orders A1 and A2" for e in log)
    assert "refunded A1" in str(results["call_a1"])
    assert api(server, token, "/sessions/v-42/recovery-plan")["repairs"] == []
    assert sessions(server, token) == ["v-42"]  # one session, named by the run's session id: no other
    # The two calls' usage (agent.mjs), each once: not the run's totals on the turn_end. @ai-sdk/otel's GenAI
    # spans carry no reasoning count (the reasoning tokens are still in the output tokens).
    assert log[-1]["data"]["metadata"]["usage"]["input_tokens"] == 90
    usage = api(server, token, "/sessions/v-42")["usage"]
    assert {kind: usage[kind] for kind in ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens")} == {
        "input_tokens": 30 + 60, "output_tokens": 12 + 9, "cache_read_tokens": 8 + 20, "cache_write_tokens": 4,
        "reasoning_tokens": 0 if sdk == "v7" else 5}  # fmt: skip
    assert (usage["models"], usage["priced"], usage["unpriced"]) == (["scripted"], False, ["scripted"])  # agent.mjs names its model "scripted": unpriced


def start_killable(server, token, conversation: str, marker: Path, *options: str) -> subprocess.Popen:
    return subprocess.Popen(command(server, token, conversation, "--crash", str(marker), *options),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def killed_inside_the_last_tool(server, token, conversation: str, marker: Path, *options: str) -> None:
    agent = start_killable(server, token, conversation, marker, *options)
    try:
        wait_for(marker.exists, seconds=30, what="the agent reached its last tool call")
        time.sleep(1.0)  # the batch processor's clock (50 ms): whatever ended is sent
    finally:
        agent.kill()
        agent.wait()


def test_a_legacy_run_killed_inside_its_only_tool_without_a_start_processor_leaves_no_session(server, token, tmp_path):
    """Version 7's legacy spans (and version 6's streamText) end the model span only after its tools
    return: a run killed inside a tool sent no span at all (docs/guide/otlp.md, "Vercel AI SDK")."""
    killed_inside_the_last_tool(server, token, "v-lost", tmp_path / "in-tool", "--sdk", "v7-legacy", "--orders", "A2")
    time.sleep(SETTLE + 1.0)
    assert sessions(server, token) == []
    assert api(server, token, "/sessions/v-lost", missing=None) is None


def test_a_legacy_run_killed_inside_a_tool_without_a_start_processor_shows_only_the_calls_that_ended(server, token, tmp_path):
    """The tools that ran beside it and returned sent their spans: the session holds those calls and
    nothing of the one in flight, which recovery cannot owe (docs/guide/otlp.md, "Vercel AI SDK")."""
    killed_inside_the_last_tool(server, token, "v-part", tmp_path / "in-tool", "--sdk", "v7-legacy")
    session = wait_for(lambda: (s := api(server, token, "/sessions/v-part", missing={}).get("status")) == "stalled" and s,
                       seconds=STALL + 10, what="stalled")
    assert session == "stalled"
    log = events(server, token, "v-part")
    assert [(e["type"], e["data"].get("id") or e["data"].get("tool_call_id")) for e in log] == [
        ("turn_start", None), ("tool_call", "call_a1"), ("tool_result", "call_a1")]
    plan = api(server, token, "/sessions/v-part/recovery-plan")
    assert [r["type"] for r in plan["repairs"]] == ["turn_end"]  # no call owed: call_a2 never reached Turnlog
    assert sessions(server, token) == ["v-part"]


KILLED = [("v7-legacy", "protobuf", "batch"), ("v7-legacy", "json", "simple"), ("v6", "protobuf", "batch"),
          ("v7", "json", "batch"), ("v7", "protobuf", "simple")]


@pytest.mark.parametrize(("sdk", "encoding", "processor"), KILLED, ids=["-".join(k) for k in KILLED])
def test_with_the_guides_pending_span_processor_a_killed_run_owes_its_call_as_outcome_unknown(server, token, tmp_path, sdk, encoding, processor):
    marker = tmp_path / "in-tool"
    agent = start_killable(server, token, "v-crash", marker, "--sdk", sdk, "--encoding", encoding,
                           "--processor", processor, "--pending")
    try:
        wait_for(marker.exists, seconds=30, what="the agent reached its last tool call")
        entered = time.monotonic()
        dispatched = wait_for(lambda: [e for e in events(server, token, "v-crash")
                                       if e["type"] == "tool_call" and e["data"]["id"] == "call_a2"],
                              seconds=5 * load_factor(), what="call_a2 recorded as dispatched")
        assert time.monotonic() - entered < 1.0 * load_factor(), "the call's start took over 1 s to be recorded"
        assert dispatched[0]["data"]["name"] == "refund"
    finally:
        agent.kill()
        agent.wait()
    session = wait_for(lambda: (s := api(server, token, "/sessions/v-crash"))["status"] == "stalled" and s,
                       seconds=STALL + 10, what="stalled")
    assert session["interrupted"]
    plan = api(server, token, "/sessions/v-crash/recovery-plan")
    owed = {r["data"]["tool_call_id"]: r["data"]["metadata"]["risk"] for r in plan["repairs"] if r["type"] == "tool_result"}
    assert owed == {"call_a2": "tool_outcome_unknown"}
    assert [r["data"]["reason"] for r in plan["repairs"] if r["type"] == "turn_end"] == ["interrupted"]
    assert sessions(server, token) == ["v-crash"]


# ---- the guide's code (docs/guide/otlp.md, "The Vercel AI SDK") --------------------------------------

GUIDE = JS.parents[1] / "docs" / "guide" / "otlp.md"


def guide_section() -> str:
    guide = GUIDE.read_text()
    return guide[guide.index("## The Vercel AI SDK (JavaScript)"):]


def test_the_guides_pending_span_processor_is_the_file_the_tests_run():
    block = re.search(r"```js pending-span-processor\.mjs\n(.*?)```", guide_section(), re.S).group(1)
    assert block == (JS / "pending-span-processor.mjs").read_text()


def test_the_guides_pending_span_processor_with_the_batch_and_the_simple_span_processor():
    done = subprocess.run([node(), "--test", str(JS / "pending-span-processor.test.mjs")], capture_output=True,
                          text=True, timeout=120, cwd=JS)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "# pass 3" in done.stdout and "# fail 0" in done.stdout


def test_the_guides_vercel_ai_example_runs_and_its_session_reads_back(server, token, tmp_path):
    script = tmp_path / "agent.mjs"
    script.write_text(re.search(r"```js\n(.*?)```", guide_section(), re.S).group(1))
    (tmp_path / "node_modules").symlink_to(JS / "node_modules")  # the packages the example's npm i names
    env = {**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": f"{server.url}/otlp",
           "OTEL_EXPORTER_OTLP_HEADERS": f"Authorization=Bearer%20{token}"}
    done = subprocess.run([node(), str(script)], env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    log = wait_for(lambda: closed(server, token, "order-a1"), what="the run's turn closed")
    # The default integration writes gen_ai.tool.call.result as JSON text ('"refunded A1"'), read as given.
    assert [e["data"]["tool_call_id"] for e in log if e["type"] == "tool_result"] == ["call_a1"]
    assert any(e["type"] == "tool_result" and "refunded A1" in e["data"]["content"] for e in log)
    assert log[-1]["data"]["reason"] == "complete"
    assert sessions(server, token) == ["order-a1"]
