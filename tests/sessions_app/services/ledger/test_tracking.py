"""ledger.tracking: rows kept in the writes' own transactions, forks listed once, a single append's lookups bounded."""

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test.utils import CaptureQueriesContext

from sessions_app import selectors, services
from sessions_app.log import events as log_events
from sessions_app.log.ledger import STATES
from sessions_app.models import LedgerCall, Session

pytestmark = pytest.mark.django_db


def ev(type_: str, data: dict) -> log_events.NewEvent:
    return log_events.NewEvent(type_, data, None)


def sighting(*ids: str) -> log_events.NewEvent:
    return ev("assistant_message", {"content": "", "tool_calls": [{"id": c, "name": "charge_card", "arguments": {"n": 1}} for c in ids]})


def listed() -> list[tuple]:
    page = selectors.fleet_calls(projects=list(Session.objects.values_list("project_id", flat=True).distinct()), states=frozenset(STATES))
    return sorted((row.session.id, row.call.call_id, row.call.state) for row in page.items)


def test_a_fork_copies_no_rows_and_its_inherited_calls_are_listed_once_under_the_parent():
    services.create_session(session_id="parent")
    services.append_events(session_id="parent", events=[sighting("a"), ev("tool_result", {"tool_call_id": "a", "content": "ok"})])
    services.fork(session_id="parent", new_session_id="child")
    assert not LedgerCall.objects.filter(session_id="child").exists()
    services.append_events(session_id="child", events=[sighting("a", "b")])  # "a" is inherited: not sighted again
    assert listed() == [("child", "b", "pending"), ("parent", "a", "completed")]


def test_a_dangling_patch_reads_no_result_in_its_own_transaction_and_a_later_real_result_supersedes_it():
    services.create_session(session_id="s")
    services.append_events(session_id="s", events=[sighting("c1")])
    services.patch_dangling_calls(session_id="s", user=get_user_model().objects.create_user("ops"))
    assert listed() == [("s", "c1", "no_result")]  # the patch's result is no tool's, though its data says nothing
    services.append_events(session_id="s", events=[ev("tool_result", {"tool_call_id": "c1", "content": "charged"})])
    [row] = LedgerCall.objects.filter(session_id="s")
    assert (row.settled_state, row.result_seq, row.patch_seq) == ("superseded", 2, 1)


def test_a_result_stored_before_its_call_is_sighted_counts():
    services.create_session(session_id="s")
    services.append_events(session_id="s", events=[ev("tool_result", {"tool_call_id": "early", "content": "done", "metadata": {"is_error": True}})])
    services.append_events(session_id="s", events=[sighting("early")])
    assert listed() == [("s", "early", "error")]


def test_a_single_append_looks_up_only_what_it_touches():
    services.create_session(session_id="s")
    services.append_events(session_id="s", events=[ev("turn_start", {"turn": 1}), ev("tool_call", {"id": "x", "name": "lookup"})])
    with CaptureQueriesContext(connection) as queries:
        services.append_events(session_id="s", events=[sighting("c1")])
    ledger_work = [q["sql"] for q in queries if "ledgercall" in q["sql"].lower() or ('"seq" <' in q["sql"] and "tool_" in q["sql"])]
    # The call's row (none yet), its results stored before, its turn's earlier dispatch, the insert.
    assert len(ledger_work) == 4, ledger_work


def test_an_imported_patch_result_stays_the_patchs_and_a_late_result_in_the_blob_supersedes_it():
    from sessions_app import selectors
    from sessions_app.log import blob as log_blob

    services.create_session(session_id="s")
    services.append_events(session_id="s", events=[sighting("c1", "c2")])
    services.patch_dangling_calls(session_id="s", user=get_user_model().objects.create_user("ops"))
    services.append_events(session_id="s", events=[ev("tool_result", {"tool_call_id": "c2", "content": "late"})])
    session = Session.objects.get(pk="s")
    extra = {log_blob.PATCH_SEQS_KEY: sorted(selectors.patch_seqs(session))}
    blob = log_blob.write_blob(selectors.session_log(session), agent_name=None, extra=extra)
    services.import_blob(blob=blob, session_id="copy")
    assert [row for row in listed() if row[0] == "copy"] == [("copy", "c1", "no_result"), ("copy", "c2", "superseded")]
