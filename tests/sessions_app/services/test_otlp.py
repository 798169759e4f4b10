"""OTLP ingest through storage: the one append path, sessions by conversation, repeats, refusals,
finished runs closed by the settle time (closer and worker), crashed runs left to recovery."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import hypothesis
import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from sessions_app import selectors, services, worker
from sessions_app.log import recovery
from sessions_app.models import AgentHour, Event, OtlpHeldSpan, OtlpTrace, Project, Session
from sessions_app.selectors import access
from hypothesis import strategies as st

from sessions_app.otel.readings import AGENT as AGENT_ROLE
from sessions_app.otel.readings import MODEL as MODEL_ROLE
from sessions_app.otel.readings import TOOL as TOOL_ROLE
from tests.access import member
from tests.sessions_app.otel.test_planner import ROOT, UNKNOWN, T, _crashed_run, chat, finished_run, tool

pytestmark = pytest.mark.django_db


@pytest.fixture
def project():
    return Project.default()


@pytest.fixture
def actor(project):
    user = get_user_model().objects.create_user("agent")
    member(user, project=project)
    return access.Actor(user=user)


def ingest(actor, project, readings, *, at=None, conversation="c-42"):
    readings = [r.__class__(**{**{f: getattr(r, f) for f in r.__dataclass_fields__}, "conversation_id": conversation}) for r in readings]
    return services.otlp.ingest_readings(actor=actor, project=project, readings=readings, received_at=at)


def types(session_id: str) -> list[str]:
    return list(Event.objects.filter(session_id=session_id).order_by("seq").values_list("type", flat=True))


def test_a_finished_run_is_stored_through_the_append_path_and_closed_after_the_settle_time(actor, project, settings):
    result = ingest(actor, project, finished_run())
    assert result.accepted == 5 and result.refused == []
    assert result.settle == {"c-42": settings.TURNLOG_OTLP_SETTLE_SECONDS}
    session = Session.objects.get(pk="c-42")  # the conversation id, as it is
    assert session.project == project and session.agent_name == "support" and session.metadata == {"source": "otlp"}
    assert session.interrupted and session.event_count == 13
    # Too early: the quiet time is not up.
    assert "c-42" in services.close_settled_turns(session_ids=["c-42"])
    assert types("c-42")[-1] == "step_end"
    assert services.close_settled_turns(session_ids=["c-42"], now=timezone.now() + timedelta(seconds=6)) == {}
    assert types("c-42")[-1] == "turn_end"
    session.refresh_from_db()
    assert not session.interrupted and session.turn_stack == [] and session.step_stack == []
    assert AgentHour.objects.get(agent_name="support").turns == 1
    assert OtlpTrace.objects.get(session=session).closed


def test_the_same_batch_twice_stores_nothing_new(actor, project):
    ingest(actor, project, finished_run())
    count = Session.objects.get(pk="c-42").event_count
    again = ingest(actor, project, finished_run())
    assert again.accepted == 5 and Session.objects.get(pk="c-42").event_count == count


def test_a_crashed_run_reads_stalled_with_its_call_owed_as_outcome_unknown(actor, project, settings):
    ingest(actor, project, _crashed_run(), at=timezone.now() - timedelta(seconds=settings.TURNLOG_STALL_SECONDS + 5))
    session = Session.objects.get(pk="c-42")
    assert session.status == "stalled"
    plan = selectors.recovery_plan(session)
    assert {r.call.id: r.call.risk for r in plan.repairs if r.call} == {"d2": UNKNOWN}
    # Nothing closes it but recovery: no root arrived.
    assert services.close_settled_turns(session_ids=["c-42"], now=timezone.now() + timedelta(hours=1)) == {}
    assert services.sessions_to_settle(now=timezone.now() + timedelta(hours=1)) == []


def test_the_worker_closes_finished_runs_a_restarted_server_left_open(actor, project):
    ingest(actor, project, finished_run())
    actions = worker.run_round(now=timezone.now() + timedelta(seconds=10))
    assert [(a.outcome, a.session_id) for a in actions] == [(worker.CLOSED, "c-42")]
    assert types("c-42")[-1] == "turn_end"
    assert worker.run_round(now=timezone.now() + timedelta(seconds=20)) == []


def test_a_conversation_id_that_is_no_session_id_maps_to_a_stable_readable_one(actor, project):
    ingest(actor, project, finished_run(), conversation="thread #7 / user@example.com")
    ingest(actor, project, finished_run(trace="b" * 32, prefix="e", at=1000), conversation="thread #7 / user@example.com")
    (session,) = Session.objects.all()
    assert session.id.startswith("thread-7-user-example.com-")
    assert session.metadata["otel"] == {"conversation_id": "thread #7 / user@example.com"}
    assert types(session.id).count("turn_start") == 2


def test_spans_of_a_trace_no_span_named_are_held_then_written_to_the_trace_session_once_quiet(actor, project, settings):
    result = ingest(actor, project, finished_run()[:1], conversation=None)
    assert result.accepted == 1 and result.held_due == settings.TURNLOG_OTLP_SETTLE_SECONDS
    assert not Session.objects.exists() and OtlpHeldSpan.objects.count() == 1
    # Not quiet yet: still held.
    assert services.release_held_spans().held_due is not None and not Session.objects.exists()
    released = services.release_held_spans(now=timezone.now() + timedelta(seconds=settings.TURNLOG_OTLP_SETTLE_SECONDS + 1))
    assert released.held_due is None and not OtlpHeldSpan.objects.exists()
    assert types(T)[:4] == ["turn_start", "system_message", "user_message", "step_start"]
    # The trace is now the session's: later spans go there at once, whatever they name.
    ingest(actor, project, finished_run()[1:], conversation="c-later")
    assert Session.objects.count() == 1 and types(T).count("tool_result") == 2


def test_held_spans_join_the_session_a_later_span_of_their_trace_names(actor, project):
    run = finished_run()
    tools, rest = run[1:3], [run[0], *run[3:]]
    ingest(actor, project, tools, conversation=None)
    assert not Session.objects.exists()
    ingest(actor, project, rest, conversation="c-42")
    assert list(Session.objects.values_list("pk", flat=True)) == ["c-42"] and not OtlpHeldSpan.objects.exists()
    services.close_settled_turns(session_ids=["c-42"], now=timezone.now() + timedelta(seconds=10))
    assert types("c-42").count("tool_result") == 2 and types("c-42")[-1] == "turn_end"
    assert recovery.plan(selectors.session_log(Session.objects.get(pk="c-42"))).repairs == []


def test_a_whole_run_without_a_conversation_is_held_even_with_its_root_then_closes_in_the_trace_session(actor, project, settings):
    ingest(actor, project, finished_run(), conversation=None)  # a later batch may still name the conversation
    assert not Session.objects.exists() and OtlpHeldSpan.objects.count() == 5
    later = timezone.now() + timedelta(seconds=settings.TURNLOG_OTLP_SETTLE_SECONDS + 1)
    released = services.release_held_spans(now=later)
    assert released.traces == 1 and released.settle == {T: settings.TURNLOG_OTLP_SETTLE_SECONDS}
    services.close_settled_turns(session_ids=[T], now=later + timedelta(seconds=settings.TURNLOG_OTLP_SETTLE_SECONDS + 1))
    assert types(T)[-1] == "turn_end" and list(Session.objects.values_list("pk", flat=True)) == [T]


def test_without_a_settle_time_nothing_is_held(actor, project, settings):
    settings.TURNLOG_OTLP_SETTLE_SECONDS = 0
    ingest(actor, project, finished_run()[:1], conversation=None)
    assert Session.objects.filter(pk=T).exists() and not OtlpHeldSpan.objects.exists()


def test_a_held_span_repeated_is_taken_once_and_with_other_content_refused(actor, project):
    first = replace(finished_run()[1], digest="d1")
    assert ingest(actor, project, [first], conversation=None).refused == []
    assert ingest(actor, project, [first], conversation=None).refused == []
    other = replace(first, digest="d2", tool_result="not done")
    refused = ingest(actor, project, [other], conversation=None).refused
    assert len(refused) == 1 and "other content" in refused[0].reason
    assert OtlpHeldSpan.objects.count() == 1


def test_held_content_no_database_stores_is_refused_when_it_arrives(actor, project):
    bad = tool("b000000000000009", "zz", tool_result="nul \x00")
    refused = ingest(actor, project, [bad], conversation=None).refused
    assert [r.span_id for r in refused] == ["b000000000000009"] and not OtlpHeldSpan.objects.exists()


def test_the_worker_writes_the_holds_a_restart_left_behind(actor, project, settings):
    ingest(actor, project, finished_run()[1:3], conversation=None)
    worker.close_finished_runs(now=timezone.now() + timedelta(seconds=settings.TURNLOG_OTLP_SETTLE_SECONDS + 1))
    assert types(T).count("tool_result") == 2 and not OtlpHeldSpan.objects.exists()


def test_a_span_taken_again_under_another_conversation_stays_in_its_first_session(actor, project):
    ingest(actor, project, finished_run())
    again = ingest(actor, project, finished_run(), conversation="c-other")
    assert again.refused == [] and list(Session.objects.values_list("pk", flat=True)) == ["c-42"]


def test_a_span_repeating_its_ids_with_other_content_is_refused_with_the_reason(actor, project):
    run = [replace(r, digest=f"d{i}") for i, r in enumerate(finished_run())]
    ingest(actor, project, run)
    changed = replace(run[1], digest="changed", tool_result="something else")
    result = ingest(actor, project, [changed, run[2]])
    assert result.accepted == 1 and [r.span_id for r in result.refused] == [changed.span_id]
    assert "other content" in result.refused[0].reason
    assert types("c-42").count("tool_result") == 2


def test_a_trace_of_another_project_refuses_its_spans(actor, project):
    other = Project.objects.create(slug="other", name="Other")
    services.otlp.ingest_readings(actor=actor, project=other, readings=[replace(r, conversation_id="x-1") for r in finished_run()])
    result = ingest(actor, project, finished_run(), conversation="c-42")
    assert result.accepted == 0 and "another project" in result.refused[0].reason
    assert not Session.objects.filter(pk="c-42").exists()


def test_a_conversation_naming_a_session_of_another_project_is_refused_and_stores_nothing(actor, project):
    other = Project.objects.create(slug="other", name="Other")
    services.create_session(session_id="c-42", project=other)
    result = ingest(actor, project, finished_run())
    assert result.accepted == 0 and len(result.refused) == 5
    assert "another project" in result.refused[0].reason
    assert Session.objects.get(pk="c-42").event_count == 0


def test_a_refused_span_stores_nothing_and_the_rest_of_the_batch_goes_in(actor, project):
    run = finished_run()
    bad = chat("c0000000000000ff", ["zz"], text="nul \x00")
    result = ingest(actor, project, [*run, bad])
    assert [r.span_id for r in result.refused] == ["c0000000000000ff"]
    assert "zz" not in {e.data.get("id") for e in Event.objects.filter(session_id="c-42", type="tool_call")}
    assert Session.objects.get(pk="c-42").event_count == 13


def test_sequential_runs_number_their_turns_across_batches(actor, project):
    ingest(actor, project, finished_run())
    ingest(actor, project, finished_run(trace="b" * 32, prefix="e", at=1000))
    services.close_settled_turns(session_ids=["c-42"], now=timezone.now() + timedelta(seconds=10))
    starts = Event.objects.filter(session_id="c-42", type="turn_start").order_by("seq")
    assert [e.data["turn"] for e in starts] == [1, 2]
    assert [e.data["reason"] for e in Event.objects.filter(session_id="c-42", type="turn_end")] == ["complete", "complete"]


def test_a_late_root_after_recovery_writes_no_second_turn_end(actor, project):
    user = get_user_model().objects.create_user("ops")
    member(user, project=project, role="admin")
    ingest(actor, project, _crashed_run())
    services.recover(session_id="c-42", user=user)
    ingest(actor, project, finished_run(trace="b" * 32, prefix="d", at=1000)[2:])
    services.close_settled_turns(session_ids=["c-42"], now=timezone.now() + timedelta(seconds=10))
    ends = Event.objects.filter(session_id="c-42", type="turn_end")
    assert [e.data["reason"] for e in ends] == ["interrupted"]


def test_spans_of_a_root_that_is_no_agent_close_their_run(actor, project):
    from sessions_app.otel.readings import OTHER, Reading

    http_root = Reading(OTHER, T, "9999999999999999", None, "POST /chat", start_ns=1, end_ns=200)
    ingest(actor, project, [chat("a000000000000001", [], parent=ROOT, text="hi"), http_root])
    services.close_settled_turns(session_ids=["c-42"], now=timezone.now() + timedelta(seconds=10))
    assert types("c-42")[-1] == "turn_end"


@pytest.mark.django_db(transaction=True)
def test_concurrent_batches_over_the_same_new_sessions_all_go_in(actor, project):
    """Batches that create and lock the same sessions at once (each its own run in every session) all
    go in whole: sessions are taken in id order, agent counts in key order, so on PostgreSQL they
    queue for each other rather than deadlock, and on SQLite the write lock serialises them."""
    import random
    import threading

    from django.db import connections

    sessions = [f"conc-{i}" for i in range(6)]
    rnd = random.Random(5)

    def batch(writer: int) -> list:
        readings = []
        for n, sid in enumerate(rnd.sample(sessions, len(sessions))):
            trace = f"{writer:02x}{n:02x}".ljust(32, "e")
            prefix = f"{writer:x}{n:x}"
            readings += [replace(r, conversation_id=sid) for r in finished_run(trace=trace, prefix=prefix, at=writer * 1000)]
        return readings

    batches = [batch(writer) for writer in range(4)]
    errors, start = [], threading.Barrier(len(batches))

    def send(readings):
        try:
            start.wait(timeout=10)
            result = services.otlp.ingest_readings(actor=actor, project=project, readings=readings)
            assert not result.refused, result.refused
        except BaseException as error:  # reported below
            errors.append(error)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=send, args=(readings,)) for readings in batches]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors, errors
    for sid in sessions:
        turns = Event.objects.filter(session_id=sid, type="turn_start").order_by("seq")
        assert [e.data["turn"] for e in turns] == [1, 2, 3, 4]
    counts = AgentHour.objects.filter(agent_name="support")
    assert sum(c.sessions for c in counts) == len(sessions) and sum(c.turns for c in counts) == 4 * len(sessions)


# -- one run, one session, whatever order its spans arrive in and whichever name the conversation -------------

_examples = iter(range(10**6))


def _summary(session_id: str) -> dict:
    log = selectors.session_log(Session.objects.get(pk=session_id))
    calls = sorted(e.data["id"] for e in log if e.type == "tool_call")
    results = sorted(e.data["tool_call_id"] for e in log if e.type == "tool_result")
    ends = sorted(e.data["reason"] for e in log if e.type == "turn_end")
    risks = {r.call.id: r.call.risk for r in recovery.plan(log).repairs if r.call is not None}
    return {"calls": calls, "results": results, "turns": [e.type for e in log].count("turn_start"), "ends": ends, "risks": risks}


@hypothesis.settings(max_examples=60, deadline=None, suppress_health_check=[hypothesis.HealthCheck.function_scoped_fixture])
@hypothesis.given(rnd=st.randoms(use_true_random=False), batches=st.integers(1, 7), pending=st.booleans(),
                  named=st.sets(st.sampled_from(["root", "model", "tool"]), min_size=1), crash=st.booleans())
def test_a_run_lands_in_its_conversation_in_any_order_whichever_spans_name_it(actor, project, settings, rnd, batches, pending, named, crash):
    """Spans of one run (a model span around its tools, as ADK and legacy Vercel send them), shuffled and
    re-batched, with the conversation on some kinds of span only and pending spans or not: every call and
    result lands in the conversation's session, no other session is made, and the calls, results, turns and
    risks are those of the run sent whole."""
    from tests.sessions_app.otel.test_planner import model_around_tools_run, started

    n = next(_examples)
    trace, conversation = f"{n:032x}", f"conv-{n}"
    kinds = {AGENT_ROLE: "root", MODEL_ROLE: "model", TOOL_ROLE: "tool"}
    run = [replace(r, trace_id=trace, conversation_id=conversation if kinds[r.role] in named else None)
           for r in model_around_tools_run()]
    if crash:  # the process died in c2's tool: neither it, its model span nor the root ever ended
        run = [r for r in run if r.span_id not in ("e0000000000000b2", "e0000000000000a1", ROOT, "e0000000000000a2")]
        run += [started(r) for r in model_around_tools_run(trace=trace) if r.span_id in ("e0000000000000b2", "e0000000000000a1", ROOT)]
        run = [replace(r, conversation_id=conversation) if r.pending and kinds[r.role] in named else r for r in run]
    spans = [*run, *(started(r) for r in run if not r.pending)] if pending else run
    rnd.shuffle(spans)
    cuts = sorted(rnd.sample(range(1, len(spans)), min(batches, len(spans)) - 1)) if len(spans) > 1 else []
    at = timezone.now()
    for i, j in zip([0, *cuts], [*cuts, len(spans)], strict=True):
        at += timedelta(seconds=0.1)
        result = services.otlp.ingest_readings(actor=actor, project=project, readings=spans[i:j], received_at=at)
        assert result.refused == []
    later = at + timedelta(seconds=settings.TURNLOG_OTLP_SETTLE_SECONDS + 1)
    services.release_held_spans(now=later)
    services.close_settled_turns(session_ids=[conversation], now=later + timedelta(seconds=settings.TURNLOG_OTLP_SETTLE_SECONDS + 1))
    assert not OtlpHeldSpan.objects.filter(trace_id=trace).exists()
    assert list(OtlpTrace.objects.filter(trace_id=trace).values_list("session_id", flat=True)) == [conversation]
    assert not Session.objects.filter(pk=trace).exists()
    summary = _summary(conversation)
    if crash:
        assert summary["calls"] == ["c1", "c2"] and summary["results"] == ["c1"] and summary["ends"] == []
        assert summary["risks"] == {"c2": UNKNOWN}
    else:
        assert summary == {"calls": ["c1", "c2"], "results": ["c1", "c2"], "turns": 1, "ends": ["complete"], "risks": {}}


def test_a_batch_over_many_sessions_reads_the_projects_tool_policies_once(actor, project, monkeypatch):
    from sessions_app.services.ledger import facts

    reads = []
    real = facts.project_policies
    monkeypatch.setattr(facts, "project_policies", lambda project_id: reads.append(project_id) or real(project_id))
    runs = [replace(r, trace_id=f"{n:032x}", conversation_id=f"c-{n}") for n in range(5) for r in finished_run()]
    assert services.otlp.ingest_readings(actor=actor, project=project, readings=runs).refused == []
    assert Session.objects.count() == 5 and reads == [project.pk]
