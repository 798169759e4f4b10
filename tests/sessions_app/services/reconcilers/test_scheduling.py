"""Which calls get a reconciler's check (sessions_app.services.reconcilers.scheduling): a call that reads
tool_outcome_unknown (its session stalled, or a recovery answered it so) and whose tool's policy names a check
endpoint, unless it has a verdict; and "Check now"."""

from __future__ import annotations

from datetime import timedelta

import pytest

from sessions_app import services
from sessions_app.lib.errors import CallNotFound, NoReconciler
from sessions_app.models import CallCheck, Project, Role, ToolPolicy
from sessions_app.selectors.access import Actor, Forbidden
from sessions_app.services import reconcilers
from tests.access import member
from tests.sessions_app.services.notify.crashes import crashed, now, stalled_clock

from tests.reconciler_endpoint import check_policy


@pytest.fixture
def policy(db):
    return check_policy("https://reconciler.example.org/check", "whsec_" + "A" * 43)


@pytest.mark.django_db
def test_a_stalled_crash_gets_a_check_for_its_unknown_call_only_once_stalled(policy):
    session = crashed("crash-1")
    assert reconcilers.schedule_checks(now=now()) == []  # still running: its call is pending, not unknown
    later = stalled_clock(session)
    assert reconcilers.schedule_checks(now=later) == [("crash-1", "c3")]  # c2 was never dispatched: not started
    check = CallCheck.objects.get()
    assert (check.state, check.next_at, check.policy_id, check.attempts) == (CallCheck.PENDING, later, policy.pk, 0)
    assert reconcilers.schedule_checks(now=later + timedelta(minutes=1)) == []  # one check per call


@pytest.mark.django_db
def test_no_check_without_a_check_url_or_with_a_verdict(db, django_user_model):
    ToolPolicy.objects.create(pattern="tool_c3", side_effect=ToolPolicy.EXTERNAL_EFFECT)
    session = crashed("crash-1")
    assert reconcilers.schedule_checks(now=stalled_clock(session)) == []
    # A project's own policy names an endpoint; a verdict already recorded keeps the call off the list.
    check_policy("https://reconciler.example.org/check", "whsec_" + "A" * 43, project=Project.default())
    services.verdicts.record_reconciler_verdict(session_id="crash-1", call_id="c3", pattern="x", outcome="happened", evidence="seen")
    assert reconcilers.schedule_checks(now=stalled_clock(session)) == []


@pytest.mark.django_db
def test_a_recovery_that_answers_a_call_as_unknown_queues_its_check(policy, django_user_model):
    operator = django_user_model.objects.create_user("op")
    member(operator, Role.OPERATOR)
    crashed("crash-1")  # still running: no check from the scan yet
    services.recover(session_id="crash-1", user=operator)
    assert list(CallCheck.objects.values_list("call_id", "state")) == [("c3", CallCheck.PENDING)]


@pytest.mark.django_db
def test_check_now_needs_recover_and_a_reconciler_and_asks_a_check_that_gave_up_again(policy, django_user_model):
    session = crashed("crash-1")
    operator, viewer = django_user_model.objects.create_user("op"), django_user_model.objects.create_user("viewer")
    member(operator, Role.OPERATOR)
    member(viewer, Role.VIEWER)
    with pytest.raises(Forbidden):
        reconcilers.queue_check(actor=Actor(viewer), session_id="crash-1", call_id="c3")
    with pytest.raises(CallNotFound):
        reconcilers.queue_check(actor=Actor(operator), session_id="crash-1", call_id="nope")
    with pytest.raises(NoReconciler, match="no tool policy with a check_url matches tool 'tool_c1'"):
        reconcilers.queue_check(actor=Actor(operator), session_id="crash-1", call_id="c1")
    reconcilers.schedule_checks(now=stalled_clock(session))
    CallCheck.objects.update(state=CallCheck.GAVE_UP, attempts=8, next_at=now() + timedelta(days=9))
    check = reconcilers.queue_check(actor=Actor(operator), session_id="crash-1", call_id="c3")
    check.refresh_from_db()
    assert (check.state, check.attempts) == (CallCheck.PENDING, 0) and check.next_at <= now()
