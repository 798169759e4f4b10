"""OTLP ingest through storage: the one append path, sessions by conversation, repeats, refusals,
finished runs closed by the settle time (closer and worker), crashed runs left to recovery."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from sessions_app import selectors, services, worker
from sessions_app.models import AgentHour, Event, OtlpTrace, Project, Session
from sessions_app.selectors import access
from tests.access import member
from tests.sessions_app.otel.test_planner import ROOT, UNKNOWN, T, _crashed_run, chat, finished_run

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


def test_spans_without_a_conversation_go_to_their_trace_or_the_session_it_was_bound_to(actor, project):
    ingest(actor, project, finished_run()[:1], conversation=None)
    assert Session.objects.filter(pk=T).exists()
    ingest(actor, project, finished_run()[1:], conversation=None)
    assert Session.objects.count() == 1 and types(T).count("tool_result") == 2


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
    import dataclasses
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
            readings += [dataclasses.replace(r, conversation_id=sid) for r in finished_run(trace=trace, prefix=prefix, at=writer * 1000)]
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
