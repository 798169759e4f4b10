"""manage.py ledger_rebuild: fills the ledger of logs stored before it, resumes after an id, and is idempotent."""

import pytest
from django.core.management import call_command
from django.utils import timezone

from sessions_app import selectors, services
from sessions_app.log import events as log_events
from sessions_app.models import LedgerCall, Session, Verdict
from sessions_app.services import verdicts as verdict_services

pytestmark = pytest.mark.django_db


def crashed(session_id: str) -> None:
    services.create_session(session_id=session_id, agent_name="bot")
    services.append_events(session_id=session_id, events=[
        log_events.NewEvent("turn_start", {"turn": 1}, None),
        log_events.NewEvent("assistant_message", {"content": "", "tool_calls": [{"id": "c1", "name": "charge", "arguments": {"amount": 5}}]}, None),
        log_events.NewEvent("tool_call", {"id": "c1", "name": "charge"}, None),
        log_events.NewEvent("assistant_message", {"content": "", "tool_calls": [{"id": "c2", "name": "refund"}]}, None),
        log_events.NewEvent("tool_result", {"tool_call_id": "c2", "content": "ok"}, None),
    ])  # fmt: skip


def states() -> dict:
    page = selectors.fleet_calls(projects=list(Session.objects.values_list("project_id", flat=True).distinct()), states=frozenset({"pending", "completed", "tool_outcome_unknown"}))
    return {(r.session.id, r.call.call_id): (r.call.state, r.call.result_seq) for r in page.items}


def test_a_rebuild_gives_the_rows_the_appends_kept_and_resumes_after_an_id(capsys):
    crashed("a")
    crashed("b")
    kept = states()
    assert kept[("a", "c1")] == ("pending", None) and kept[("a", "c2")] == ("completed", 4)
    LedgerCall.objects.all().delete()  # as stored before the ledger existed (rows are derived, not events)
    call_command("ledger_rebuild", "--after", "a")
    assert {key for key in states()} == {("b", "c1"), ("b", "c2")}
    call_command("ledger_rebuild")
    call_command("ledger_rebuild")  # again: the same rows, none twice
    assert states() == kept
    assert LedgerCall.objects.count() == 4
    assert "done: 2 sessions, 4 calls" in capsys.readouterr().out


def test_a_rebuild_keeps_the_rows_copy_of_the_current_verdicts():
    crashed("a")
    verdict_services.record_reconciler_verdict(session_id="a", call_id="c1", pattern="charge", outcome="happened", evidence="found", external_ref="ch_1")
    verdict_services.record_reconciler_verdict(session_id="a", call_id="c2", pattern="refund", outcome="not_happened", evidence="none")
    Verdict.objects.filter(call_id="c2").update(withdrawn_at=timezone.now(), withdrawn_by="ada")
    LedgerCall.objects.all().delete()
    call_command("ledger_rebuild")
    assert dict(LedgerCall.objects.values_list("call_id", "verdict")) == {"c1": "happened", "c2": None}
    assert LedgerCall.objects.get(call_id="c1").verdict_ref == "ch_1"
    LedgerCall.objects.filter(call_id="c2").update(verdict="happened")  # a stale copy is put right
    call_command("ledger_rebuild")
    assert LedgerCall.objects.get(call_id="c2").verdict is None
