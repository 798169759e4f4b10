"""Recovering a settled crash with no person (sessions_app.services.settled_recovery, through worker.run_round): where
the project turned auto_recover_settled on and a reconciler settled every unknown external call, the worker appends
the plan and the recovery context and says why; otherwise it leaves the session for a person."""

from __future__ import annotations

import pytest

from sessions_app import services, worker
from sessions_app.models import AuditEntry, AutoRecoveryPolicy, Event, Project, RecoveryRecord, Role, Session
from sessions_app.selectors.access import Actor
from sessions_app.services import reconcilers
from tests.access import member
from tests.reconciler_endpoint import Answer, check_policy, endpoint  # noqa: F401  (the fixture)
from tests.sessions_app.services.notify.crashes import crashed, stalled_clock

HAPPENED = Answer(body={"outcome": "happened", "evidence": "charged", "external_ref": "ch_1"})


@pytest.fixture(autouse=True)
def local_endpoint(settings):
    settings.TURNLOG_WEBHOOK_ALLOW_PRIVATE = True


def settled_crash(endpoint, *, setting: bool, answer: Answer = HAPPENED):
    """A stalled crash whose unknown call c3 its reconciler answered; the moment after."""
    Project.objects.filter(slug="default").update(auto_recover_settled=setting)
    check_policy(endpoint.answer("/check", answer), endpoint.secret)
    session = crashed("crash-1")
    later = stalled_clock(session)
    reconcilers.schedule_checks(now=later)
    reconcilers.ask_due(now=later)
    return session, later


def outcomes(actions) -> dict[str, str]:
    return {a.session_id: a.outcome for a in actions if a.outcome in ("recovered", "held")}


@pytest.mark.django_db
def test_with_the_setting_on_a_settled_crash_is_recovered_with_the_recovery_context(endpoint):
    session, later = settled_crash(endpoint, setting=True)
    actions = worker.run_round(now=later)
    assert outcomes(actions) == {"crash-1": "recovered"}
    record = RecoveryRecord.objects.get()
    why = "tool_c3 (c3) settled by reconciler:tool_c3: happened, ch_1"
    assert (record.automatic, record.policy, record.username, record.note) == (True, None, "automatic (settled by reconciler)", why)
    assert record.context_seq == record.last_seq
    context = Event.objects.get(session=session, seq=record.context_seq)
    assert context.type == "system_message" and context.data["metadata"]["recovery_context"] is True
    assert not Session.objects.get(pk="crash-1").interrupted
    entry = AuditEntry.objects.get(action=AuditEntry.RECOVERY)
    assert (entry.actor_name, entry.detail["automatic"], entry.detail["context"], entry.detail["why"]) == ("worker", True, True, why)
    assert [a.why for a in actions if a.outcome == "recovered"] == [why]


@pytest.mark.django_db
def test_with_the_setting_off_nothing_is_recovered(endpoint):
    _, later = settled_crash(endpoint, setting=False)
    assert outcomes(worker.run_round(now=later)) == {}
    assert Session.objects.get(pk="crash-1").interrupted and not RecoveryRecord.objects.exists()


@pytest.mark.django_db
def test_an_unknown_answer_or_a_persons_verdict_is_no_reconcilers_settlement(endpoint, django_user_model):
    _, later = settled_crash(endpoint, setting=True, answer=Answer(body={"outcome": "unknown", "evidence": "later"}))
    assert outcomes(worker.run_round(now=later)) == {}
    operator = django_user_model.objects.create_user("op")
    member(operator, Role.OPERATOR)
    services.verdicts.record_verdict(actor=Actor(operator), session_id="crash-1", call_id="c3", outcome="happened", evidence="I looked")
    assert outcomes(worker.run_round(now=later)) == {}  # a person settled it: a person recovers it
    assert Session.objects.get(pk="crash-1").interrupted


@pytest.mark.django_db
def test_a_disabled_auto_recovery_policy_keeps_its_agents_settled_crashes_for_a_person(endpoint):
    AutoRecoveryPolicy.objects.create(agent_pattern="bot", enabled=False)
    _, later = settled_crash(endpoint, setting=True)
    assert outcomes(worker.run_round(now=later)) == {}


@pytest.mark.django_db
def test_past_the_hourly_limit_a_settled_crash_is_held_for_a_person(endpoint):
    AutoRecoveryPolicy.objects.create(agent_pattern="b*", max_per_hour=1, min_quiet_seconds=0)
    session, later = settled_crash(endpoint, setting=True)
    RecoveryRecord.objects.create(session=session, username="x", digest="d", first_seq=0, last_seq=0, automatic=True, agent_name="bot", created_at=later)
    assert outcomes(worker.run_round(now=later)) == {"crash-1": "held"}
    assert Session.objects.get(pk="crash-1").repeated_failures_at == later
