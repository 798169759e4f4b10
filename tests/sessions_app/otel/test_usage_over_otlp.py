"""Usage through real frameworks over OTLP into the API's `usage` (api.md, "Usage and cost"): Claude through
Pydantic AI's AnthropicModel and the real `anthropic` SDK, against a local HTTP server answering as Anthropic's
Messages API does (its `input_tokens` leave out the cache reads and writes), exported over OTLP to a live Daphne.
The session's usage counts every input token, the cache exactly once, and not the run totals the agent span carries
on its turn_end. The counts and the cost are worked out by hand below."""

from __future__ import annotations

import json
import threading
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.sessions_app.otel.test_pydantic_ai import api, closed, run_agent, wait_for

# The two answers of the scripted Messages API, each with Anthropic's own usage object.
ASK_TOOLS = {
    "content": [{"type": "tool_use", "id": f"toolu_{order.lower()}", "name": "refund", "input": {"order": order}} for order in ("A1", "A2")],
    "stop_reason": "tool_use",
    "usage": {"input_tokens": 25, "output_tokens": 60, "cache_read_input_tokens": 4000, "cache_creation_input_tokens": 1000},
}  # fmt: skip
ANSWER = {
    "content": [{"type": "text", "text": "Both orders are refunded."}],
    "stop_reason": "end_turn",
    "usage": {"input_tokens": 140, "output_tokens": 30, "cache_read_input_tokens": 5000, "cache_creation_input_tokens": 0},
}  # fmt: skip
MODEL = "claude-sonnet-4-5-20250929"

# By hand: input = uncached + cache reads + cache writes, of both calls.
INPUT = (25 + 4000 + 1000) + (140 + 5000 + 0)  # 10165
# claude-sonnet-4-5 per million tokens: $3 input, $0.30 cache read, $3.75 cache write, $15 output.
COST = (Decimal(25 + 140) * 3 + Decimal(4000 + 5000) * Decimal("0.30") + Decimal(1000) * Decimal("3.75") + Decimal(60 + 30) * 15) / 1_000_000


def stream_of(message: dict) -> list[dict]:
    """The Messages API's server-sent events for `message`: the usage of the input on message_start, the output's
    on message_delta, as Anthropic streams them."""
    usage = message["usage"]
    start = {**message, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 1}}
    events: list[dict] = [{"type": "message_start", "message": start}]
    for index, block in enumerate(message["content"]):
        if block["type"] == "text":
            events += [{"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}},
                       {"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": block["text"]}}]
        else:
            events += [{"type": "content_block_start", "index": index, "content_block": {**block, "input": {}}},
                       {"type": "content_block_delta", "index": index,
                        "delta": {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}}]
        events.append({"type": "content_block_stop", "index": index})
    events.append({"type": "message_delta", "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
                   "usage": {"output_tokens": usage["output_tokens"]}})
    return [*events, {"type": "message_stop"}]


@pytest.fixture
def messages_api():
    """A local Anthropic Messages API: tools first, then, once the tool results are sent, a text answer."""
    received: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            request = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
            received.append({"path": self.path, "body": request})
            last = request["messages"][-1]["content"]
            resulted = isinstance(last, list) and any(part.get("type") == "tool_result" for part in last)
            body = {"id": f"msg_{len(received)}", "type": "message", "role": "assistant", "model": MODEL, "stop_sequence": None,
                    **(ANSWER if resulted else ASK_TOOLS)}  # fmt: skip
            streamed = bool(request.get("stream"))
            payload = "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in stream_of(body)).encode() if streamed else json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream" if streamed else "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", received
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_claude_through_pydantic_ai_over_otlp_counts_its_cache_reads_and_writes_once_and_not_the_run_totals(server, token, messages_api):
    base_url, received = messages_api
    run_agent(server, token, "claude-1", "--anthropic", base_url)
    assert [r["path"].split("?")[0] for r in received] == ["/v1/messages", "/v1/messages"]
    log = wait_for(lambda: closed(server, token, "claude-1"), what="the turn closed after the settle time")
    stored = [e["data"]["metadata"]["usage"] for e in log if e["type"] == "assistant_message" and "usage" in e["data"]["metadata"]]
    # The mapping stores the conventions' inclusive input_tokens (Pydantic AI adds the cache to Anthropic's).
    assert [(u["input_tokens"], u.get("cache_read_input_tokens"), u.get("cache_creation_input_tokens")) for u in stored] == [
        (5025, 4000, 1000), (5140, 5000, None)]  # fmt: skip
    run_totals = log[-1]["data"]["metadata"]["usage"]
    assert run_totals["input_tokens"] == INPUT  # on the turn_end, and never added to the steps'
    usage = api(server, token, "/sessions/claude-1")["usage"]
    assert usage == {
        "input_tokens": INPUT, "output_tokens": 90, "cache_read_tokens": 9000, "cache_write_tokens": 1000,
        "reasoning_tokens": 0, "models": [MODEL], "cost": usage["cost"], "currency": "USD", "priced": True, "unpriced": [],
    }  # fmt: skip
    assert Decimal(usage["cost"]) == COST == Decimal("0.008295")
