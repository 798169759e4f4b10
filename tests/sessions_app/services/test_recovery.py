"""Recovery through storage: the indexed plan, the locked apply, the audit trail."""

import uuid

import pytest
from django.contrib.auth import get_user_model
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessions_app import selectors, services
from sessions_app.lib import errors
from sessions_app.log import events as log_events
from sessions_app.log import recovery
from sessions_app.log.events import event_to_wire, validate_batch
from sessions_app.models import Event, RecoveryRecord, Session
from tests.concurrency import run_at_once
from tests.sessions_app.log.strategies import events_of, logs
from tests.sessions_app.log.test_recovery import WORKED_EXAMPLE, assistant, dispatch, result
from tests.sessions_app.test_worker import tools  # noqa: F401  (a fixture)


def store(items_or_events, session_id=None, chunk=None) -> Session:
    """Append a log through the service, in chunks, and return its session.

    Each chunk is received at its last event's time, as if written then: a log from
    January reads as quiet since January (stalled, when a turn is open)."""
    wire = [
        {"type": e.type, "data": e.data, "time": event_to_wire(e)["time"]}
        for e in (events_of(items_or_events) if items_or_events and isinstance(items_or_events[0], tuple) else items_or_events)
    ]
    session = services.create_session(session_id=session_id or uuid.uuid4().hex)
    chunk = chunk or max(len(wire), 1)
    for start in range(0, len(wire), chunk):
        events = validate_batch(wire[start : start + chunk])
        services.append_events(session_id=session.id, events=events, received_at=events[-1].time)
    return Session.objects.get(pk=session.id)


def indexed_plan(session: Session) -> recovery.Plan:
    """The plan read from storage, the same whether it reads the open turn itself or is handed it."""
    whole, placement = selectors.placed_log_events(Event.objects.filter(session=session).order_by("seq"))
    tail = selectors.complete_tail(session, whole)
    planned = selectors.recovery_plan(session)
    assert selectors.recovery_plan(session, tail=tail, placement=placement) == planned
    # With the call lookups a page made for every call it shows (here: all of the log's).
    calls = selectors.call_lookups(session, every_call_id(whole))
    assert selectors.recovery_plan(session, tail=tail, placement=placement, calls=calls) == planned
    assert selectors.recovery_plan(session, calls=calls) == planned
    return planned


def every_call_id(events) -> set[str]:
    named = {log_events.call_id(c) for e in events if e.type == "assistant_message" for c in log_events.tool_calls_of(e.data)}
    return (named | {log_events.call_id(e.data) for e in events if e.type in ("tool_call", "tool_result")}) - {None}


@pytest.fixture
def operator(django_user_model):
    return django_user_model.objects.create_user("operator", is_staff=True)


@pytest.mark.django_db
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(events=logs(), chunk=st.integers(1, 7))
def test_the_indexed_plan_equals_the_plan_of_the_whole_log(events, chunk):
    session = store(events, chunk=chunk)
    assert selectors.recovery_plan(session) == recovery.plan(selectors.session_log(session))


@pytest.mark.django_db
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(events=logs(), chunk=st.integers(1, 7))
def test_the_plan_from_a_tail_already_read_equals_the_plan_of_the_whole_log(events, chunk):
    """The page's live frame hands over the open turn it read: the plan must not change."""
    session = store(events, chunk=chunk)
    whole = selectors.session_log(session)
    assert (selectors.complete_tail(session, whole) is None) == (not session.turn_stack)
    assert indexed_plan(session) == recovery.plan(whole)


@pytest.mark.django_db
def test_a_tail_with_a_gap_or_cut_short_is_not_complete():
    session = store([("user_message", {"content": "hi"}), ("turn_start", {"turn": 1}), assistant("c1"), dispatch("c1")])
    whole = selectors.session_log(session)
    assert [e.seq for e in selectors.complete_tail(session, whole)] == [1, 2, 3]
    assert selectors.complete_tail(session, [e for e in whole if e.seq != 2]) is None
    assert selectors.complete_tail(session, whole[:-1]) is None
    assert selectors.complete_tail(session, whole[2:]) is None  # the turn_start itself is missing


@pytest.mark.django_db
def test_an_earlier_sighting_of_a_call_keeps_it_out_of_the_open_turn():
    items = [("turn_start", {"turn": 1}), assistant("c1"), ("turn_end", {"turn": 1, "steps": 0, "reason": "complete"}),
             ("turn_start", {"turn": 2}), assistant("c1", "c2")]  # fmt: skip
    session = store(items)
    planned = indexed_plan(session)
    assert planned == recovery.plan(events_of(items))
    assert [r.data.get("tool_call_id") for r in planned.repairs] == ["c2", None]


@pytest.mark.django_db
def test_calls_with_ids_longer_than_the_column_are_found_before_the_turn_too():
    long_done, long_owed = "d" * 300, "o" * 300  # stored as digests
    items = [assistant(long_done), dispatch(long_done), result(long_done), ("turn_start", {"turn": 1}), assistant(long_done, long_owed)]
    planned = indexed_plan(store(items))
    assert planned == recovery.plan(events_of(items))
    assert [r.data.get("tool_call_id") for r in planned.repairs] == [long_owed, None]


@pytest.mark.django_db
def test_a_step_opened_before_the_turn_still_decides_rule_3():
    items = [("step_start", {}), ("turn_start", {"turn": 1}), assistant("c1"), ("step_end", {"outcome": "ok"})]
    planned = indexed_plan(store(items))
    assert planned == recovery.plan(events_of(items))
    assert (planned.repairs[0].call.rule, planned.repairs[0].data["metadata"]["risk"]) == (3, "tool_not_started")


@pytest.mark.django_db
def test_earlier_dispatches_results_and_stray_turn_ends_are_read():
    items = [("turn_end", {"reason": "complete"}), dispatch("c1"), result("c2"), ("turn_start", {"turn": 1}),
             assistant("c1", "c2", "c3")]  # fmt: skip
    planned = indexed_plan(store(items))
    assert planned == recovery.plan(events_of(items))
    assert planned.warnings == ["turn_end at seq 0 closes no open turn"]
    # c1 was first sighted (dispatched) outside any turn, c2 was answered: only c3 is owed.
    assert [(r.data.get("tool_call_id"), r.call and r.call.rule) for r in planned.repairs] == [("c3", 4), (None, None)]


@pytest.mark.django_db
def test_a_clean_session_keeps_its_warnings_and_an_empty_plan():
    planned = indexed_plan(store([("turn_end", {"reason": "complete"})]))
    assert (planned.repairs, planned.warnings) == ([], ["turn_end at seq 0 closes no open turn"])


@pytest.mark.django_db
def test_recover_appends_the_plan_and_records_who_and_why(operator):
    session = store(WORKED_EXAMPLE, session_id="crashed")
    digest = selectors.recovery_plan(session).digest(session.event_count)
    applied = services.recover(session_id="crashed", user=operator, digest=digest, note="agent host rebooted")
    assert [e.seq for e in applied.appended] == [10, 11, 12]
    assert [e.type for e in applied.appended] == ["tool_result", "tool_result", "turn_end"]
    record = RecoveryRecord.objects.get()
    assert (record.username, record.note, record.digest, record.first_seq, record.last_seq) == (
        "operator", "agent host rebooted", digest, 10, 12,
    )  # fmt: skip
    session.refresh_from_db()
    assert not session.interrupted and session.event_count == 13
    again = services.recover(session_id="crashed", user=operator)
    assert again.appended == [] and RecoveryRecord.objects.count() == 1


@pytest.mark.django_db
def test_a_stale_digest_appends_nothing_and_returns_the_fresh_plan(operator):
    session = store(WORKED_EXAMPLE, session_id="crashed")
    digest = selectors.recovery_plan(session).digest(session.event_count)
    services.append_events(session_id="crashed", events=validate_batch([{"type": "tool_result", "data": {"tool_call_id": "c3", "content": "late"}}]))
    with pytest.raises(errors.StalePlan) as refused:
        services.recover(session_id="crashed", user=operator, digest=digest)
    assert refused.value.next_seq == 11
    assert [r.data.get("tool_call_id") for r in refused.value.plan.repairs] == ["c2", None]
    assert Event.objects.filter(session_id="crashed").count() == 11 and not RecoveryRecord.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_two_people_confirming_one_plan_at_once_append_once():
    people = [get_user_model().objects.create_user(f"op{i}", is_staff=True) for i in range(2)]
    session = store(WORKED_EXAMPLE, session_id="crashed")
    digest = selectors.recovery_plan(session).digest(session.event_count)

    def confirm(person):
        try:
            return len(services.recover(session_id="crashed", user=person, digest=digest).appended)
        except errors.StalePlan as stale:
            return ("stale", stale.plan.repairs)

    outcomes = run_at_once(confirm, [(p,) for p in people])
    assert sorted(outcomes, key=str) == [("stale", []), 3]
    assert Event.objects.filter(session_id="crashed").count() == 13
    assert RecoveryRecord.objects.count() == 1


@pytest.mark.django_db
def test_the_dangling_patch_waits_for_recovery_then_applies_once(operator):
    items = [assistant("early"), *WORKED_EXAMPLE]
    store(items, session_id="s")
    with pytest.raises(errors.RecoveryFirst):
        services.patch_dangling_calls(session_id="s", user=operator)
    services.recover(session_id="s", user=operator)
    patched = services.patch_dangling_calls(session_id="s", user=operator)
    assert [e.data["tool_call_id"] for e in patched.appended] == ["early"]
    assert patched.record.kind == RecoveryRecord.DANGLING_PATCH
    assert services.patch_dangling_calls(session_id="s", user=operator).appended == []


@pytest.mark.django_db
def test_the_auto_recovery_policy_leaves_a_crash_only_a_verdict_made_safe(tools):
    """Such a crash is a person's, or the settled-crash path's where the project chose so (with the context message)."""
    from sessions_app.models import AutoRecoveryPolicy, Project
    from sessions_app.services import settled_recovery
    from sessions_app.services import verdicts as verdict_services
    from tests.sessions_app.test_worker import QUIET, crash

    policy = AutoRecoveryPolicy.objects.create(agent_pattern="*", min_quiet_seconds=300)
    session = crash("s", "bot", "send_email", quiet=QUIET)
    verdict_services.record_reconciler_verdict(session_id="s", call_id="c1", pattern="send_*", outcome="not_happened", evidence="no mail")
    Session.objects.filter(pk="s").update(last_activity_at=session.last_activity_at)  # the verdict counts for retention, not quiet
    turns = selectors.recovery_strategies(selectors.recovery_plan(Session.objects.get(pk="s")), session=session)
    assert [t.strategy for t in turns] == ["restart_turn"]
    assert services.recover_automatically(session_id="s", policy=policy) is None
    Project.objects.filter(pk=session.project_id).update(auto_recover_settled=True)
    assert services.recover_automatically(session_id="s", policy=policy) is None
    result = settled_recovery.recover_settled(session_id="s", policy=policy)
    assert result is not None and result.record.automatic
    assert result.appended[0].data["metadata"]["verdict"]["outcome"] == "not_happened"
    assert "verified not happened by reconciler:send_*" in result.appended[-1].data["content"]
