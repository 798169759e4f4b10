"""The worker's reconciler threads (sessions_app.services.reconcilers.pool, through worker.run_round): a slow check
endpoint holds up neither the round (an automatic recovery in it) nor another check."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.utils import timezone

from sessions_app import services, worker
from sessions_app.log.events import validate_batch
from sessions_app.models import AutoRecoveryPolicy, CallCheck, Project, ToolPolicy, Verdict
from tests.reconciler_endpoint import Answer, check_policy
from tests.sessions_app import factories as f
from tests.sessions_app.services.notify.crashes import crashed


def read_only_crash(session_id: str) -> None:
    """A crash an auto-recovery policy restarts: its one owed call is a read-only tool's."""
    services.create_session(session_id=session_id, agent_name="indexer")
    calls = [{"id": "l1", "name": "lookup_x", "arguments": {}}]
    events = [f.user(), f.event("turn_start", turn=1), f.event("assistant_message", content="", name=None, metadata={}, tool_calls=calls)]
    services.append_events(session_id=session_id, events=validate_batch([*events, f.event("tool_call", id="l1", name="lookup_x")]))


@pytest.mark.django_db(transaction=True)
def test_a_slow_endpoint_holds_up_neither_the_round_nor_another_check(endpoint):
    slow, fast = Project.objects.create(slug="slow", name="Slow"), Project.objects.create(slug="fast", name="Fast")
    happened = {"outcome": "happened", "evidence": "found"}
    check_policy(endpoint.answer("/slow", Answer(body=happened, delay=3)), endpoint.secret, project=slow)
    check_policy(endpoint.answer("/fast", Answer(body=happened)), endpoint.secret, project=fast)
    crashed("slow-1", project=slow)
    crashed("fast-1", project=fast)
    ToolPolicy.objects.create(pattern="lookup_*", side_effect=ToolPolicy.READ_ONLY)
    AutoRecoveryPolicy.objects.create(agent_pattern="indexer")
    read_only_crash("restartable")
    later = timezone.now() + timedelta(hours=1)  # every session stalled and quiet long enough

    started = time.monotonic()
    actions = worker.run_round(now=later)
    assert time.monotonic() - started < 2  # the slow endpoint answers after 3 s
    assert {a.session_id: a.outcome for a in actions}["restartable"] == "recovered"
    while not Verdict.objects.filter(session_id="fast-1").exists():
        assert time.monotonic() - started < 2.5, "the fast check waited for the slow one"
        time.sleep(0.05)
    assert not Verdict.objects.filter(session_id="slow-1").exists()
    assert CallCheck.objects.get(session_id="slow-1").claimed_until is not None  # claimed: no other round asks it

    finished = worker.finish_checks()
    assert {a.session_id for a in finished} >= {"slow-1"}
    assert Verdict.objects.filter(session_id="slow-1", by="reconciler:tool_c3").exists()
    assert len(endpoint.received) == 2 and endpoint.bad_signatures == 0
