"""selectors.session_ledger: the session's calls read from the call ledger are session_calls' rows (same states,
same order, same notes), for a session and for its forks; bounded, it keeps every call to check and the latest."""

import pytest
from django.contrib.auth import get_user_model
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessions_app import selectors, services
from sessions_app.log.events import validate_batch
from sessions_app.log.fork import ForkRefused
from sessions_app.models import LedgerCall, Session
from sessions_app.services import ledger
from tests.sessions_app.log.strategies import logs, message
from tests.sessions_app.log.test_recovery import WORKED_EXAMPLE, assistant, result
from tests.sessions_app.services.test_recovery import store

pytestmark = pytest.mark.django_db


def as_read(rows) -> list[tuple]:
    return [(r.call, r.side_effect, r.time, [n.pk for n in r.notes]) for r in rows]


def same_rows(session_id: str) -> None:
    session = Session.objects.get(pk=session_id)
    for all_classes in (True, False):
        expected = as_read(selectors.session_calls(session, all_classes=all_classes))
        assert as_read(selectors.session_ledger(session, all_classes=all_classes).rows) == expected
        bounded = selectors.session_ledger(session, all_classes=all_classes, latest=10_000)
        assert bounded.complete
        assert as_read(bounded.rows) == expected


def late_result(session_id: str, call_id: str) -> None:
    services.append_events(session_id=session_id, events=validate_batch([{"type": "tool_result", "data": result(call_id)[1]}]))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(events=logs(), late=st.booleans())
def test_the_rows_are_session_calls_before_and_after_recovery_a_late_result_a_patch_and_in_forks(events, late):
    operator = get_user_model().objects.get_or_create(username="ledger-ops", is_staff=True)[0]
    session = store(events)
    same_rows(session.id)
    owed = [r.call.id for r in selectors.recovery_plan(session).repairs if r.call is not None]
    services.recover(session_id=session.id, user=operator)
    same_rows(session.id)
    try:
        fork = services.fork(session_id=session.id).id  # inherits the recovery's stand-ins
    except ForkRefused:
        fork = None
    if late and owed:
        late_result(session.id, owed[0])  # the parent's late result: not the fork's
        if fork:
            same_rows(fork)
            late_result(fork, owed[-1])  # the fork's own: superseded in the fork
    same_rows(session.id)
    services.patch_dangling_calls(session_id=session.id, user=operator)
    same_rows(session.id)
    if fork:
        same_rows(fork)
        try:
            grandchild = services.fork(session_id=fork).id
        except ForkRefused:
            return
        same_rows(grandchild)
        if owed:
            late_result(grandchild, owed[0])
            same_rows(grandchild)
        same_rows(fork)


def test_bounded_it_keeps_every_call_to_check_and_the_latest_others():
    # Forty answered calls, then the worked example's crash: c2 and c3 owed.
    early = [item for i in range(40) for item in (assistant(f"e{i}"), result(f"e{i}"))]
    session = store([("user_message", message("go")), *early, *WORKED_EXAMPLE[1:]], session_id="long")
    found = selectors.session_ledger(session, all_classes=True, latest=3)
    assert not found.complete
    assert [(r.call.call_id, r.call.state) for r in found.rows] == [  # in order of first sighting
        ("e39", "completed"), ("c1", "completed"), ("c2", "tool_not_started"), ("c3", "tool_outcome_unknown"),
    ]  # fmt: skip
    services.recover(session_id="long", user=get_user_model().objects.create_user("ops2"))
    late_result("long", "c3")  # superseded: recovery's stand-in came first
    for n in range(3):  # newer calls: c3, superseded, stays however many come after it
        services.append_events(session_id="long", events=validate_batch([
            {"type": "assistant_message", "data": message("", tool_calls=[{"id": f"n{n}", "name": "echo"}])},
            {"type": "tool_result", "data": message("ok", tool_call_id=f"n{n}")},
        ]))  # fmt: skip
    kept = selectors.session_ledger(Session.objects.get(pk="long"), all_classes=True, latest=2).rows
    assert [(r.call.call_id, r.call.state) for r in kept] == [("c3", "superseded"), ("n1", "completed"), ("n2", "completed")]


def test_a_fork_lists_its_inherited_calls_as_its_own_log_states_them():
    operator = get_user_model().objects.create_user("ops3")
    store([("user_message", message("go")), *WORKED_EXAMPLE[1:]], session_id="crashed")
    services.recover(session_id="crashed", user=operator)
    fork = services.fork(session_id="crashed").id
    late_result("crashed", "c3")  # in the parent only
    states = {r.call.call_id: r.call.state for r in selectors.session_ledger(Session.objects.get(pk=fork), all_classes=True).rows}
    assert states["c3"] == "tool_outcome_unknown"
    late_result(fork, "c2")
    fork_rows = selectors.session_ledger(Session.objects.get(pk=fork), all_classes=True, latest=0).rows
    assert {r.call.call_id: r.call.state for r in fork_rows} == {"c2": "superseded", "c3": "tool_outcome_unknown"}
    fleet = selectors.fleet_calls(projects=[Session.objects.get(pk=fork).project_id], limit=200)
    assert {(r.session.id, r.call.call_id, r.call.state) for r in fleet.items} == {
        ("crashed", "c3", "superseded"), (fork, "c2", "superseded"),  # the fork's own row of an inherited call
    }  # fmt: skip
    LedgerCall.objects.filter(session_id=fork).delete()
    assert ledger.rebuild(Session.objects.get(pk=fork)) == 1  # from the fork's log: the call its own result changed
    fleet = selectors.fleet_calls(projects=[Session.objects.get(pk=fork).project_id], limit=200)
    assert [(r.call.call_id, r.call.state) for r in fleet.items if r.session.id == fork] == [("c2", "superseded")]
    same_rows(fork)
