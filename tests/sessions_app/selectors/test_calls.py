"""selectors.calls: the patch seqs come from dangling-patch records only, and the log is read once."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from sessions_app import selectors
from sessions_app.models import RecoveryRecord, Session
from sessions_app.selectors.calls import patch_seqs
from tests.sessions_app.api.http import append, make_session
from tests.sessions_app.log.strategies import message

pytestmark = pytest.mark.django_db


def record(session, kind, first, last):
    RecoveryRecord.objects.create(session=session, kind=kind, username="ops", digest="d", first_seq=first, last_seq=last)


def test_patch_seqs_are_the_dangling_patches_ranges_and_never_a_recoverys(api):
    make_session(api, "s")
    session = Session.objects.get(pk="s")
    record(session, RecoveryRecord.DANGLING_PATCH, 3, 4)
    record(session, RecoveryRecord.DANGLING_PATCH, 9, 9)
    record(session, RecoveryRecord.RECOVERY, 5, 8)
    assert patch_seqs(session) == {3, 4, 9}


def test_the_log_is_read_once_whatever_the_number_of_calls(api):
    make_session(api, "s")
    calls = [{"id": f"c{i}", "name": "charge"} for i in range(20)]
    append(api, "s", [{"type": "assistant_message", "data": message("", tool_calls=calls)}])
    session = Session.objects.select_related("project").get(pk="s")
    with CaptureQueriesContext(connection) as queries:
        rows = selectors.session_calls(session, all_classes=True)
    assert len(rows) == 20
    # The log, the patch records, the policies, the notes, the current verdicts: one query each.
    assert len(queries) == 5, [q["sql"] for q in queries]


def test_a_calls_notes_are_those_on_its_sighting_dispatches_and_results(api, agent_user):
    from sessions_app import services
    from sessions_app.selectors import access

    make_session(api, "s")
    append(api, "s", [
        {"type": "assistant_message", "data": message("", tool_calls=[{"id": "c1", "name": "charge"}])},  # 0
        {"type": "tool_call", "data": {"id": "c1", "name": "charge"}},  # 1
        {"type": "tool_result", "data": message("ok", tool_call_id="c1")},  # 2
        {"type": "user_message", "data": message("thanks")},  # 3
    ])  # fmt: skip
    author = access.Actor(user=agent_user)
    for seq in (None, 0, 1, 2, 3):
        services.add_note(actor=author, session_id="s", text=f"on {seq}", seq=seq)
    (row,) = selectors.session_calls(Session.objects.get(pk="s"), all_classes=True)
    assert [n.text for n in row.notes] == ["on 0", "on 1", "on 2"]
