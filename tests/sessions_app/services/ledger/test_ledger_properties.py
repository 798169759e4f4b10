"""The ledger's states equal log.ledger's (selectors.session_calls reads the whole log) for random logs.

Before and after a fork (the fork's rows: the calls its own events sighted first or decided; its panel,
selectors.session_ledger, lists its inherited calls too, as its log states them), a
recovery, a late real result, a dangling-call patch and a result after it; with the
stall window long (running sessions: pending) and zero (the same sessions stalled);
and a rebuild from the log (manage.py ledger_rebuild) gives the same rows.
"""

from __future__ import annotations

import json
import uuid

import pytest
from django.test import override_settings
from hypothesis import HealthCheck, Phase, event, example, given, note, settings
from hypothesis import strategies as st

from sessions_app import selectors, services
from sessions_app.lib.errors import RecoveryFirst
from sessions_app.log import events as log_events
from sessions_app.log.fork import ForkRefused
from sessions_app.log.ledger import STATES
from sessions_app.models import Session
from sessions_app.services import ledger
from tests.wire_batches import batches_of

pytestmark = pytest.mark.django_db

PROPERTY = settings(
    # No shrinking: a failure prints every step of its example (note), and shrinking these logs takes minutes.
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)


def valid(batch: list[dict]) -> list[log_events.NewEvent]:
    out = []
    for item in batch:
        try:
            out.append(log_events.validate_event(item.get("type"), item.get("data"), item.get("time")))
        except Exception:  # noqa: BLE001 - the API would refuse the batch; the property skips the event
            continue
    return out


def _shape(call_id, name, arguments, seq, turn_seq, state, result_seq):
    return (call_id, json.dumps(name, sort_keys=True, default=str), json.dumps(arguments, sort_keys=True, default=str), seq, turn_seq, state, result_seq)


def shapes(rows) -> list[tuple]:
    return sorted(_shape(r.call.call_id, r.call.name, r.call.arguments, r.call.seq, r.call.turn_seq, r.call.state, r.call.result_seq) for r in rows)


def from_the_ledger(session: Session) -> list[tuple]:
    page = selectors.fleet_calls(projects=[session.project_id], states=frozenset(STATES), limit=100_000)
    return shapes(r for r in page.items if r.session.id == session.id)


def assert_agrees(session_id: str, where: str) -> None:
    """The session's own rows in the fleet are session_calls' rows: every call its own events sighted first,
    and every inherited call its own events decided (a fork's copy of it); its panel's rows are all of them."""
    for window in (3600, 0):  # running sessions, then the same sessions stalled
        with override_settings(TURNLOG_STALL_SECONDS=window):
            session = Session.objects.select_related("project").get(pk=session_id)
            every = selectors.session_calls(session, all_classes=True)
            expected = shapes(every)
            note(f"{where} (stall window {window}s): {expected}")
            assert shapes(selectors.session_ledger(session, all_classes=True).rows) == expected, where
            in_fleet = from_the_ledger(session)
            assert set(in_fleet) <= set(expected), where
            own = [r for r in every if r.call.seq >= session.seed_length or (r.call.result_seq or -1) >= session.seed_length]
            assert set(shapes(own)) <= set(in_fleet), where
            for shape in expected:
                event(f"state {shape[5]}" + (" (inherited)" if shape[3] < session.seed_length else ""))


def try_a_fork(sid: str, batch: list[dict], user) -> None:
    try:
        child = services.fork(session_id=sid).id
    except ForkRefused:  # the log ends inside an open turn
        return
    assert_agrees(child, "a new fork")
    if events := valid(batch):
        services.append_events(session_id=child, events=events)
    assert_agrees(child, "a fork's own appends")
    services.recover(session_id=child, user=user)
    assert_agrees(child, "a recovered fork")
    late_result_for_an_inherited_call(child, "a fork")
    try:
        grandchild = services.fork(session_id=child).id
    except ForkRefused:
        return
    assert_agrees(grandchild, "a fork of a fork")
    late_result_for_an_inherited_call(grandchild, "a fork of a fork")


def late_result_for_an_inherited_call(sid: str, where: str) -> None:
    """A result the fork writes about a call of its prefix (the latest one): the fork's own row of it from now on."""
    session = Session.objects.get(pk=sid)
    inherited = [c for c in selectors.session_calls(session, all_classes=True) if c.call.seq < session.seed_length]
    if inherited:
        late = log_events.NewEvent("tool_result", {"tool_call_id": inherited[-1].call.call_id, "content": "late in the fork"}, None)
        services.append_events(session_id=sid, events=[late])
        assert_agrees(sid, f"a late result in {where} for an inherited call")


@PROPERTY
@given(
    batches=st.lists(batches_of(hostile=False), min_size=1, max_size=3),
    fork_at_end=st.booleans(),
    after_fork=batches_of(hostile=False),
)
# An id and a name written with an exponent: PostgreSQL's jsonb reads them back as integers, and the
# append reads them so too (log.events.id_text).
@example(
    batches=[[{"type": "assistant_message", "data": {"tool_calls": [{"id": -3.9e16, "name": 1e17}]}}]],
    fork_at_end=False,
    after_fork=[],
)
def test_the_ledger_states_every_call_as_the_log_does(batches, fork_at_end, after_fork, django_user_model):
    user, _ = django_user_model.objects.get_or_create(username="ops")
    sid = uuid.uuid4().hex
    services.create_session(session_id=sid, agent_name="prop")
    for batch in batches:
        if events := valid(batch):
            services.append_events(session_id=sid, events=events)
        assert_agrees(sid, "after an append")

    if fork_at_end:
        try_a_fork(sid, after_fork, user)
    services.recover(session_id=sid, user=user)
    assert_agrees(sid, "after recovery")
    try_a_fork(sid, after_fork, user)
    calls = selectors.session_calls(Session.objects.get(pk=sid), all_classes=True)
    if calls:  # a late real result for the first call, as an agent that came back would write it
        late = log_events.NewEvent("tool_result", {"tool_call_id": calls[0].call.call_id, "content": "done"}, None)
        services.append_events(session_id=sid, events=[late])
        assert_agrees(sid, "after a late result")
    try:
        services.patch_dangling_calls(session_id=sid, user=user)
    except RecoveryFirst:
        pass
    assert_agrees(sid, "after a dangling-call patch")
    patched = [c for c in selectors.session_calls(Session.objects.get(pk=sid), all_classes=True) if c.call.state == "no_result"]
    if patched:
        late = log_events.NewEvent("tool_result", {"tool_call_id": patched[-1].call.call_id, "content": "late", "metadata": {"error": "x"}}, None)
        services.append_events(session_id=sid, events=[late])
        assert_agrees(sid, "after a result following a patch")
    ledger.rebuild(Session.objects.get(pk=sid))
    assert_agrees(sid, "after a rebuild")
