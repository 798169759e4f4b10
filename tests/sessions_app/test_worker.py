"""The automatic recovery worker (session-log.md section 8.1) on the real database: SQLite, then PostgreSQL."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.test import Client, override_settings
from django.utils import timezone

from sessions_app import services, worker
from sessions_app.log.events import validate_batch
from sessions_app.models import AuditEntry, AutoRecoveryPolicy, Event, RecoveryRecord, Session, ToolPolicy
from tests.concurrency import run_at_once
from tests.sessions_app import factories as f

QUIET = timedelta(minutes=20)  # beyond the default policy's 15 minutes


def crash(session_id: str, agent: str, tool: str, *, answered: bool = False, quiet: timedelta = QUIET) -> Session:
    """A session whose agent dispatched `tool` inside an open turn (and got its result if `answered`), then went quiet."""
    services.create_session(session_id=session_id, agent_name=agent)
    events = [
        f.user(),
        f.event("turn_start", turn=1),
        f.event("step_start", turn=1, step=1),
        f.event("assistant_message", content="", name=None, metadata={}, tool_calls=[{"id": "c1", "name": tool, "arguments": {}}]),
        f.event("tool_call", id="c1", name=tool),
    ]
    if answered:
        events.append(f.event("tool_result", tool_call_id="c1", name=tool, content="sent", metadata={}))
    services.append_events(session_id=session_id, events=validate_batch(events))
    # A round takes the oldest first: sessions made earlier stay older.
    Session.objects.filter(pk=session_id).update(last_activity_at=timezone.now() - quiet)
    return Session.objects.get(pk=session_id)


@pytest.fixture
def tools(db):
    ToolPolicy.objects.create(pattern="lookup_*", side_effect=ToolPolicy.READ_ONLY)
    ToolPolicy.objects.create(pattern="send_*", side_effect=ToolPolicy.EXTERNAL_EFFECT)


def outcomes(actions) -> dict[str, str]:
    return {a.session_id: a.outcome for a in actions}


@pytest.mark.django_db(transaction=True)
def test_a_read_only_crash_is_recovered_automatically_once_with_two_workers_at_once(tools):
    policy = AutoRecoveryPolicy.objects.create(agent_pattern="indexer-*")
    ids = [f"ro-{n}" for n in range(3)]
    for session_id in ids:
        crash(session_id, "indexer-1", "lookup_customer")

    rounds = run_at_once(lambda: worker.run_round(), [(), ()])

    assert not [r for r in rounds if isinstance(r, Exception)], rounds
    recovered = sorted(a.session_id for r in rounds for a in r if a.outcome == worker.RECOVERED)
    assert recovered == ids  # each exactly once, by one worker or the other
    assert RecoveryRecord.objects.count() == 3
    for session_id in ids:
        record = RecoveryRecord.objects.get(session_id=session_id)
        assert (record.automatic, record.policy_id, record.user_id, record.agent_name) == (True, policy.pk, None, "indexer-1")
        assert record.strategy_names == ["restart_turn"] and record.username == "automatic (indexer-*)"
        assert record.quiet_seconds >= QUIET.total_seconds()
        session = Session.objects.get(pk=session_id)
        assert not session.interrupted and session.turn_stack == [] and session.event_count == 7  # 5 + a result + turn_end
        assert Event.objects.filter(session_id=session_id, seq__gte=5).count() == 2
        audit = AuditEntry.objects.get(action=AuditEntry.RECOVERY, target=session_id)
        assert audit.actor_name == "worker" and audit.detail["automatic"] and audit.detail["policy"] == "indexer-*"
    assert worker.run_round() == []  # nothing left to do


@pytest.mark.django_db
def test_external_effects_are_never_recovered_automatically(tools):
    AutoRecoveryPolicy.objects.create(agent_pattern="*")
    crash("owed-email", "mailer", "send_email")  # outcome unknown: manual_check
    crash("sent-email", "mailer", "send_email", answered=True)  # happened: resume_after_effects
    crash("unknown-tool", "mailer", "mystery")  # no tool policy: unknown, manual_check
    crash("lookup", "mailer", "lookup_order")  # the control: the same agent, a read-only crash

    assert outcomes(worker.run_round()) == {
        "owed-email": "skipped", "sent-email": "skipped", "unknown-tool": "skipped", "lookup": "recovered",
    }  # fmt: skip
    assert list(RecoveryRecord.objects.values_list("session_id", flat=True)) == ["lookup"]
    # Found unsafe, they are not planned again each round (so they cannot crowd out new crashes) ...
    assert worker.run_round() == []
    # ... until their log grows: then the worker decides again (and still leaves it).
    services.append_events(session_id="owed-email", events=validate_batch([f.event("step_start", turn=1, step=2)]))
    Session.objects.filter(pk="owed-email").update(last_activity_at=timezone.now() - QUIET)
    assert outcomes(worker.run_round()) == {"owed-email": "skipped"}
    for session_id in ["owed-email", "sent-email", "unknown-tool"]:
        session = Session.objects.get(pk=session_id)
        assert session.interrupted and session.repeated_failures_at is None  # left for a person, not flagged


@pytest.mark.django_db
def test_the_strategy_is_recomputed_at_recovery_time(tools):
    """A tool policy changed since the crash decides: now external, the read-only crash is left."""
    AutoRecoveryPolicy.objects.create(agent_pattern="*")
    crash("s", "bot", "lookup_customer")
    ToolPolicy.objects.create(pattern="lookup_customer", side_effect=ToolPolicy.EXTERNAL_EFFECT)  # exact beats lookup_*
    assert outcomes(worker.run_round()) == {"s": "skipped"}
    assert not RecoveryRecord.objects.exists()


@pytest.mark.django_db
def test_past_its_hourly_limit_an_agent_is_left_for_a_person_and_flagged(tools):
    AutoRecoveryPolicy.objects.create(agent_pattern="indexer-*", max_per_hour=3)
    ids = [f"crash-{n}" for n in range(4)]
    for session_id in ids:
        crash(session_id, "indexer-1", "lookup_customer")
    crash("other-agent", "indexer-2", "lookup_customer")  # the limit is per agent, not per policy

    actions = worker.run_round()

    assert outcomes(actions) == {
        "crash-0": "recovered", "crash-1": "recovered", "crash-2": "recovered", "crash-3": "held", "other-agent": "recovered",
    }  # fmt: skip
    held = Session.objects.get(pk="crash-3")
    assert held.interrupted and held.repeated_failures_at is not None
    assert not RecoveryRecord.objects.filter(session_id="crash-3").exists()
    audit = AuditEntry.objects.get(action=AuditEntry.AUTO_RECOVERY_HELD)
    assert (audit.target, audit.actor_name, audit.actor_id) == ("crash-3", "worker", None)
    assert audit.detail == {"agent_name": "indexer-1", "policy": "indexer-*", "limit": 3}
    assert worker.run_round() == []  # flagged: no longer a candidate, audited once
    assert AuditEntry.objects.filter(action=AuditEntry.AUTO_RECOVERY_HELD).count() == 1


@pytest.mark.django_db
def test_the_hourly_limit_counts_an_agent_within_its_project(tools):
    from sessions_app.models import Project

    AutoRecoveryPolicy.objects.create(agent_pattern="bot", max_per_hour=1)
    other = Project.objects.create(slug="other", name="Other team")
    crash("ours", "bot", "lookup_customer")
    services.create_session(session_id="theirs", agent_name="bot", project=other)
    services.append_events(session_id="theirs", events=validate_batch([f.event("turn_start", turn=1)]))
    Session.objects.filter(pk="theirs").update(last_activity_at=timezone.now() - QUIET)
    assert outcomes(worker.run_round()) == {"ours": "recovered", "theirs": "recovered"}


@pytest.mark.django_db
def test_recoveries_older_than_an_hour_do_not_count(tools):
    AutoRecoveryPolicy.objects.create(agent_pattern="indexer-*", max_per_hour=1)
    crash("first", "indexer-1", "lookup_customer")
    crash("second", "indexer-1", "lookup_customer")
    assert outcomes(worker.run_round()) == {"first": "recovered", "second": "held"}
    Session.objects.filter(pk="second").update(repeated_failures_at=None)  # a person looked, and left it
    RecoveryRecord.objects.update(created_at=timezone.now() - timedelta(minutes=61))
    assert outcomes(worker.run_round()) == {"second": "recovered"}


@pytest.mark.django_db
def test_a_session_quiet_less_than_its_policy_time_is_left(tools):
    AutoRecoveryPolicy.objects.create(agent_pattern="fast-*", min_quiet_seconds=300)
    AutoRecoveryPolicy.objects.create(agent_pattern="slow-*")  # 900 s
    crash("fast", "fast-1", "lookup_customer", quiet=timedelta(minutes=6))
    crash("slow", "slow-1", "lookup_customer", quiet=timedelta(minutes=6))  # a candidate of the round, not quiet enough for its own policy
    crash("fresh", "fast-1", "lookup_customer", quiet=timedelta(minutes=1))
    assert outcomes(worker.run_round()) == {"fast": "recovered"}
    assert Session.objects.get(pk="slow").interrupted and Session.objects.get(pk="fresh").interrupted
    Session.objects.filter(pk="slow").update(last_activity_at=timezone.now() - timedelta(minutes=16))
    assert outcomes(worker.run_round()) == {"slow": "recovered"}


@pytest.mark.django_db
def test_the_service_checks_the_quiet_time_again_under_the_lock(tools):
    policy = AutoRecoveryPolicy.objects.create(agent_pattern="*")
    crash("s", "bot", "lookup_customer", quiet=timedelta(minutes=5))
    assert services.recover_automatically(session_id="s", policy=policy) is None
    assert not RecoveryRecord.objects.exists()


@override_settings(TURNLOG_STALL_SECONDS=120)
@pytest.mark.django_db
def test_a_quiet_time_below_the_stall_window_is_refused():
    with pytest.raises(ValidationError) as refused:
        AutoRecoveryPolicy(agent_pattern="*", min_quiet_seconds=60).full_clean()
    assert "stall window" in str(refused.value.message_dict["min_quiet_seconds"])
    AutoRecoveryPolicy(agent_pattern="*", min_quiet_seconds=120).full_clean()  # the window itself is enough
    assert AutoRecoveryPolicy().min_quiet_seconds == 900 and AutoRecoveryPolicy().max_per_hour == 3


@pytest.mark.django_db
def test_the_admin_form_refuses_a_quiet_time_below_the_stall_window(django_user_model):
    client = Client()
    client.force_login(django_user_model.objects.create_superuser("root", password="x"))
    form = {"agent_pattern": "indexer-*", "enabled": "on", "min_quiet_seconds": "30", "max_per_hour": "3", "note": ""}
    response = client.post("/admin/sessions_app/autorecoverypolicy/add/", form)
    assert response.status_code == 200 and b"stall window" in response.content
    assert not AutoRecoveryPolicy.objects.exists()
    response = client.post("/admin/sessions_app/autorecoverypolicy/add/", {**form, "min_quiet_seconds": "900"})
    assert response.status_code == 302 and AutoRecoveryPolicy.objects.get().agent_pattern == "indexer-*"
    listed = client.get("/admin/sessions_app/autorecoverypolicy/")
    assert b"indexer-*" in listed.content and b"900" in listed.content


@pytest.mark.django_db
def test_a_disabled_policy_stops_a_broader_one(tools):
    AutoRecoveryPolicy.objects.create(agent_pattern="*")
    AutoRecoveryPolicy.objects.create(agent_pattern="billing-*", enabled=False)
    crash("billing", "billing-bot", "lookup_customer")
    crash("other", "indexer", "lookup_customer")
    assert outcomes(worker.run_round()) == {"other": "recovered"}
    assert Session.objects.get(pk="billing").interrupted


@pytest.mark.django_db
def test_no_enabled_policy_means_no_candidates(tools, django_assert_num_queries):
    AutoRecoveryPolicy.objects.create(agent_pattern="*", enabled=False)
    crash("s", "bot", "lookup_customer")
    worker.run_round()  # notes the stall once (sessions_app/services/notify); no webhook to tell, so nothing to say
    # Projects with a retention, OTLP spans held for their conversation, finished OTLP runs to close, stalls not
    # yet noted, tool policies naming a check endpoint, the projects' prices versions and their sessions priced before
    # them (sessions_app/services/usage.py), the policies, and crashes a reconciler settled.
    with django_assert_num_queries(9):
        assert worker.run_round() == []


def test_the_policy_of_an_agent():
    policies = [AutoRecoveryPolicy(agent_pattern=p) for p in ["*", "index*", "indexer-*", "indexer-7", "ind?xer-7"]]
    pick = lambda name: (worker.policy_for(name, policies) or AutoRecoveryPolicy(agent_pattern="none")).agent_pattern  # noqa: E731
    assert pick("indexer-7") == "indexer-7"  # exact beats a longer or equal pattern
    assert pick("indexer-8") == "indexer-*"  # the longest match
    assert pick("indexing") == "index*"
    assert pick("mailer") == "*"
    assert pick("") == "*"
    assert worker.policy_for("mailer", policies[1:]) is None
