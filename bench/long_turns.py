"""Long turns benchmark: a session page holding one very long turn, loaded and followed live.

In this process, on a fresh database (SQLite by default; --db postgres):

1. **Page loads.** Three sessions: a 100-event session (one turn of tool-call
   steps, the page's everyday case), one open turn of 20,000 events (4,000
   tool-call steps) and a 10,000-span OTLP run (one agent run of 5,000 model
   calls and 5,000 tool calls, GenAI conventions, made by the OpenTelemetry SDK
   and posted to /otlp/v1/traces as protobuf in the batch exporter's batches of
   512). Server time of `GET /sessions/{id}/` through django.test.Client,
   rounds taking the three in turn, median of --runs after two warm-up rounds
   (on PostgreSQL after an ANALYZE, as autovacuum would have run one).
   Target: each long page within PAGE_RATIO (1.5) of the 100-event one's time,
   measured in the same run.
2. **Live frames.** One open turn grows to --frame-events (10,000) events, one
   at a time; after each, the frame a page socket sends for it
   (dashboard.live.frames.render_page_frame, as a member with fork rights and a
   note form would get it). Reported: the largest message and the largest frame
   along the turn, at each thousandth event, and the render time. Target: every
   message under frames.FRAME_BYTES (64 KiB), the frame of the last event too.

The exit status is 1 when a target is missed. Results: docs/performance.md.

    .venv/bin/python bench/long_turns.py [--db sqlite|postgres] [--runs N] [--turn-events N] [--spans N] [--frame-events N]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time

from _common import Target, build_session, db_version, machine_line, setup_django, torn_down

PAGE_RATIO = 1.5
SMALL_EVENTS = 100


def tool_step(n: int, rng: random.Random) -> list[dict]:
    cid = f"call-{n}"
    return [
        {"type": "step_start", "data": {"step": n}},
        {"type": "assistant_message", "data": {"content": f"Looking up {n}.", "tool_calls": [{"id": cid, "name": "lookup", "arguments": {"query": f"q{n}", "limit": rng.randint(1, 20)}}]}},
        {"type": "tool_call", "data": {"id": cid, "name": "lookup"}},
        {"type": "tool_result", "data": {"tool_call_id": cid, "content": " ".join(f"word{rng.randint(0, 999)}" for _ in range(40))}},
        {"type": "step_end", "data": {"step": n, "outcome": "ok"}},
    ]


def one_turn(events: int, *, seed: int) -> list[dict]:
    """A user message, then one open turn of tool-call steps: `events` events in all."""
    rng = random.Random(seed)
    out = [{"type": "user_message", "data": {"content": "Look everything up."}}, {"type": "turn_start", "data": {"turn": 1}}]
    n = 0
    while len(out) < events:
        out += tool_step(n, rng)
        n += 1
    return out[:events]


def otlp_run(spans: int) -> list:
    """One agent run as the OpenTelemetry SDK ends its spans: an invoke_agent span around `spans` chat and execute_tool spans."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("bench.long_turns")
    base = {"gen_ai.conversation.id": "otlp-run", "gen_ai.agent.name": "bench-agent", "gen_ai.provider.name": "openai"}
    with tracer.start_as_current_span("invoke_agent bench-agent", attributes={**base, "gen_ai.operation.name": "invoke_agent"}):
        for n in range(spans // 2):
            cid = f"call-{n}"
            with tracer.start_as_current_span("chat bench-model", attributes={
                **base, "gen_ai.operation.name": "chat", "gen_ai.request.model": "bench-model",
                "gen_ai.output.messages": f'[{{"role": "assistant", "parts": [{{"type": "text", "content": "step {n}"}}, '
                                          f'{{"type": "tool_call", "id": "{cid}", "name": "lookup", "arguments": {{"query": "q{n}"}}}}]}}]',
                "gen_ai.usage.input_tokens": 1000 + n, "gen_ai.usage.output_tokens": 40,
            }):  # fmt: skip
                pass
            with tracer.start_as_current_span("execute_tool lookup", attributes={
                **base, "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup", "gen_ai.tool.call.id": cid,
                "gen_ai.tool.call.arguments": f'{{"query": "q{n}"}}', "gen_ai.tool.call.result": f"answer {n} " * 20,
            }):  # fmt: skip
                pass
    provider.shutdown()
    return list(exporter.get_finished_spans())


def post_otlp(client, spans: list, token: str) -> str:
    """The run's spans posted in the batch exporter's batches of 512; the session the run made."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    for start in range(0, len(spans), 512):
        body = encode_spans(spans[start : start + 512]).SerializePartialToString()
        response = client.post("/otlp/v1/traces", body, content_type="application/x-protobuf", HTTP_AUTHORIZATION=f"Bearer {token}")
        assert response.status_code == 200, response.content[:500]
    from sessions_app.models import Session

    return Session.objects.get(pk="otlp-run").pk


def analyze_tables() -> None:
    """PostgreSQL's planner statistics, as autovacuum gathers them once a table grew by a tenth: a bench that measures
    right after bulk loads would otherwise measure plans made for an empty table."""
    from django.db import connection

    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")


def page_loads(client, sessions: dict[str, str], runs: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {name: [] for name in sessions}
    for round_ in range(runs + 2):
        for name, session_id in sessions.items():
            started = time.perf_counter()
            response = client.get(f"/sessions/{session_id}/")
            elapsed = time.perf_counter() - started
            assert response.status_code == 200
            if round_ >= 2:
                times[name].append(elapsed)
    return times


def live_frames(user, events: int) -> dict:
    """A turn grown one event at a time; the page frame of each: the largest message and frame, and render times."""
    from dashboard.live import frames
    from dashboard.pages import notes
    from sessions_app import services
    from sessions_app.log import events as log_events
    from sessions_app.models import Session
    from sessions_app.selectors import access

    services.create_session(session_id="live-turn")
    rights = notes.note_rights(access.Actor(user=user), Session.objects.get(pk="live-turn").project_id)
    log = one_turn(events, seed=7)
    largest_message = largest_frame = 0
    marks, render = [], []
    for seq, event in enumerate(log):
        services.append_events(session_id="live-turn", events=log_events.validate_batch([event]))
        wire = {"seq": seq}  # the frame reads its events back from storage; the stream hands it their seqs
        started = time.perf_counter()
        messages = frames.render_page_frame("live-turn", [wire], seq - 1, True, note_rights=rights)
        render.append(time.perf_counter() - started)
        sizes = [len(m.encode()) for m in messages]
        largest_message, largest_frame = max(largest_message, *sizes), max(largest_frame, sum(sizes))
        if (seq + 1) % 1000 == 0 or seq + 1 == len(log):
            marks.append((seq + 1, max(sizes), sum(sizes), len(messages)))
    return {"largest_message": largest_message, "largest_frame": largest_frame, "marks": marks, "render": render, "limit": frames.FRAME_BYTES}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--turn-events", type=int, default=20_002)
    parser.add_argument("--spans", type=int, default=10_000)
    parser.add_argument("--frame-events", type=int, default=10_000)
    args = parser.parse_args()
    print(machine_line("bench/long_turns.py"))
    with torn_down(Target(args.db, None, prefix="turnlog-long-turns"), args.db) as target:
        target.setup(servers=0)
        setup_django(target)
        from django.contrib.auth import get_user_model
        from django.test import Client

        print(db_version())
        user = get_user_model().objects.get(username="bench")
        client = Client()
        client.force_login(user)
        build_session("small", one_turn(SMALL_EVENTS, seed=1))
        build_session("turn", one_turn(args.turn_events, seed=2))
        from sessions_app.models import ApiToken

        sessions = {"100 events": "small", f"one turn of {args.turn_events:,} events": "turn"}
        if args.spans:
            sessions[f"an OTLP run of {args.spans:,} spans"] = post_otlp(client, otlp_run(args.spans), target.token)
        analyze_tables()
        times = page_loads(client, sessions, args.runs)
        base = statistics.median(times["100 events"])
        ok = True
        print(f"\nPage loads (server time, median of {args.runs}; limit {PAGE_RATIO}x the 100-event page's, this run)")
        print(f"{'session':<34} {'events':>7} {'median ms':>10} {'ratio':>6}")
        from sessions_app.models import Session

        for name, session_id in sessions.items():
            median = statistics.median(times[name])
            ratio = median / base
            ok &= ratio <= PAGE_RATIO
            print(f"{name:<34} {Session.objects.get(pk=session_id).event_count:>7} {median * 1000:>10.1f} {ratio:>6.2f}")
        assert ApiToken  # the OTLP posts authenticate with the target's token
        if args.frame_events:
            live = live_frames(user, args.frame_events)
            print(f"\nLive frames along one open turn of {args.frame_events:,} events, one event a frame (limit {live['limit']:,} bytes a message)")
            print(f"{'event':>7} {'largest message':>16} {'frame bytes':>12} {'messages':>9}")
            for seq, message, frame, count in live["marks"]:
                print(f"{seq:>7} {message:>16,} {frame:>12,} {count:>9}")
            render = sorted(live["render"])
            print(f"largest message {live['largest_message']:,} bytes, largest frame {live['largest_frame']:,} bytes; render "
                  f"median {statistics.median(render) * 1000:.1f} ms, p99 {render[int(len(render) * 0.99)] * 1000:.1f} ms")  # fmt: skip
            ok &= live["largest_message"] <= live["limit"]
    print("\nall targets met" if ok else "\nTARGET MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
