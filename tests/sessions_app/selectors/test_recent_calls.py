"""selectors.recent_calls: the ledger panel's rows, read by index, are session_calls' rows (same states, same order)."""

import pytest
from django.contrib.auth import get_user_model
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessions_app import selectors, services
from sessions_app.log.events import validate_batch
from sessions_app.models import Session
from tests.sessions_app.log.strategies import logs, message
from tests.sessions_app.log.test_recovery import WORKED_EXAMPLE, assistant, result
from tests.sessions_app.services.test_recovery import store

pytestmark = pytest.mark.django_db


def as_read(rows) -> list[tuple]:
    return [(r.call, r.side_effect, r.time, [n.pk for n in r.notes]) for r in rows]


def same_rows(session_id: str) -> None:
    session = Session.objects.get(pk=session_id)
    for all_classes in (True, False):
        found = selectors.recent_calls(session, all_classes=all_classes, limit=10_000, scan=10_000)
        assert found.complete
        assert as_read(found.rows) == as_read(selectors.session_calls(session, all_classes=all_classes))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(events=logs(), late=st.booleans())
def test_the_rows_are_session_calls_before_and_after_recovery_a_late_result_and_a_patch(events, late):
    operator = get_user_model().objects.get_or_create(username="recent-ops", is_staff=True)[0]
    session = store(events)
    same_rows(session.id)
    owed = [r.call.id for r in selectors.recovery_plan(session).repairs if r.call is not None]
    services.recover(session_id=session.id, user=operator)
    if late and owed:
        services.append_events(session_id=session.id, events=validate_batch([{"type": "tool_result", "data": result(owed[0])[1]}]))
    same_rows(session.id)
    services.patch_dangling_calls(session_id=session.id, user=operator)
    same_rows(session.id)


def test_past_its_bounds_it_keeps_the_owed_and_recovered_calls_and_the_latest():
    # Forty answered calls, then the worked example's crash: c2 and c3 owed.
    early = [item for i in range(40) for item in (assistant(f"e{i}"), result(f"e{i}"))]
    session = store([("user_message", message("go")), *early, *WORKED_EXAMPLE[1:]], session_id="long")
    found = selectors.recent_calls(session, all_classes=True, limit=4, scan=6)
    assert not found.complete
    assert [r.call.call_id for r in found.rows] == ["c1", "c2", "c3"]  # c1 dispatched in the window; c2 and c3 owed
    assert {r.call.call_id: r.call.state for r in found.rows}["c3"] == "tool_outcome_unknown"
    services.recover(session_id="long", user=get_user_model().objects.create_user("ops2"))
    for _ in range(3):  # newer calls push c3 out of the window: recovery answered it, so it stays
        services.append_events(session_id="long", events=validate_batch([
            {"type": "assistant_message", "data": message("", tool_calls=[{"id": f"n{_}", "name": "echo"}])},
            {"type": "tool_result", "data": message("ok", tool_call_id=f"n{_}")},
        ]))  # fmt: skip
    kept = [r.call.call_id for r in selectors.recent_calls(Session.objects.get(pk="long"), all_classes=True, limit=4, scan=6).rows]
    assert kept == ["c2", "c3", "n1", "n2"]  # the recovered two, then the latest others up to the limit
