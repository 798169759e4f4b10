"""sessions_app.selectors.changes: what a socket joining late catches up on, found by the times it was written."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from sessions_app import selectors, services
from sessions_app.log.events import validate_batch
from sessions_app.models import CheckAttempt, Note, Project, Role, Session
from sessions_app.selectors import access
from sessions_app.services import verdicts
from sessions_app.services.retention.deletion import delete_session
from tests.access import member

pytestmark = pytest.mark.django_db

CALLS = [
    {"type": "turn_start", "data": {"turn": 1}},
    {"type": "assistant_message", "data": {"content": "", "tool_calls": [{"id": "c1", "name": "charge_card"}, {"id": "c2", "name": "refund"}]}},
    {"type": "tool_call", "data": {"id": "c1", "name": "charge_card"}},
    {"type": "tool_call", "data": {"id": "c2", "name": "refund"}},
    {"type": "tool_result", "data": {"tool_call_id": "c2", "content": "refunded"}},
]


@pytest.fixture
def actor():
    user = get_user_model().objects.create_user("operator")
    member(user, Role.OPERATOR)
    return access.Actor(user=user)


def session_with_calls(session_id: str = "s") -> Session:
    session = services.create_session(session_id=session_id)
    services.append_events(session_id=session_id, events=validate_batch(CALLS))
    return session


def written_earlier(model, **changes) -> None:
    """Rows written before the instant a page read (well before, past the clock margin)."""
    model.objects.update(**changes)


def test_notes_added_edited_and_deleted_name_their_places(actor):
    session = session_with_calls()
    kept = services.add_note(actor=actor, session_id="s", text="kept", seq=1)
    edited = services.add_note(actor=actor, session_id="s", text="edited", seq=None)
    deleted = services.add_note(actor=actor, session_id="s", text="deleted", seq=4)
    long_ago = timezone.now() - timedelta(hours=1)
    written_earlier(Note, created_at=long_ago, updated_at=long_ago)
    since = timezone.now()
    assert selectors.annotated_seqs_since(session_id="s", project_id=session.project_id, since=since) == []
    services.edit_note(actor=actor, note_id=edited.pk, text="edited again")
    services.delete_note(actor=actor, note_id=deleted.pk)
    services.add_note(actor=actor, session_id="s", text="new", seq=2)
    assert selectors.annotated_seqs_since(session_id="s", project_id=session.project_id, since=since) == [None, 2, 4]
    assert kept.seq == 1  # untouched since: not named


def test_verdicts_and_reconciler_attempts_name_their_calls_sighting_and_result(actor):
    session = session_with_calls()
    since = timezone.now()
    verdicts.record_verdict(actor=actor, session_id="s", call_id="c1", outcome="happened", evidence="receipt 42")
    assert selectors.annotated_seqs_since(session_id="s", project_id=session.project_id, since=since) == [1]
    CheckAttempt.objects.create(session=session, call_id="c2", pattern="refund", at=timezone.now(), status=500, error="down")
    assert selectors.annotated_seqs_since(session_id="s", project_id=session.project_id, since=since) == [1, 4]
    # A withdrawal, long after the verdict was recorded, names the call again.
    verdicts.withdraw_verdict(actor=actor, session_id="s", call_id="c1", reason="wrong card")
    written_earlier(CheckAttempt, at=since - timedelta(hours=1))
    assert selectors.annotated_seqs_since(session_id="s", project_id=session.project_id, since=since) == [1]


def test_a_change_just_before_the_instant_is_caught_up_within_the_clock_margin(actor):
    session = session_with_calls()
    services.add_note(actor=actor, session_id="s", text="committed as the page read", seq=1)
    since = timezone.now() + selectors.changes.CLOCK_MARGIN / 2
    assert selectors.annotated_seqs_since(session_id="s", project_id=session.project_id, since=since) == [1]
    later = timezone.now() + selectors.changes.CLOCK_MARGIN * 2
    assert selectors.annotated_seqs_since(session_id="s", project_id=session.project_id, since=later) == []


def test_sessions_active_since_are_the_latest_of_the_projects_oldest_activity_first():
    other = Project.objects.create(slug="other", name="Other")
    long_ago = timezone.now() - timedelta(hours=1)
    for name in ("quiet", "busy", "new"):
        services.create_session(session_id=name)
    services.create_session(session_id="elsewhere", project=other)
    Session.objects.filter(pk="quiet").update(last_activity_at=long_ago, created_at=long_ago)
    Session.objects.filter(pk="busy").update(created_at=long_ago)
    since = timezone.now()
    services.append_events(session_id="busy", events=validate_batch([{"type": "user_message", "data": {"content": "more"}}]))
    default = Session.objects.get(pk="new").project_id
    found = selectors.sessions_active_since(projects=[default], since=since)
    assert [sid for sid, _ in found] == ["new", "busy"]  # "new" was created within the margin
    assert dict(found)["busy"] == long_ago
    assert [sid for sid, _ in selectors.sessions_active_since(projects=[default], since=since, limit=1)] == ["busy"]
    assert selectors.changed_since(projects=[other.pk], since=since)
    assert not selectors.changed_since(projects=[other.pk], since=since + timedelta(hours=1))


def test_rows_changed_with_no_event_are_those_with_a_verdict_an_attempt_recovery_held_or_a_deletion(actor):
    for name in ("verdict", "attempt", "held", "untouched"):
        session_with_calls(name)
    since = timezone.now()
    verdicts.record_verdict(actor=actor, session_id="verdict", call_id="c1", outcome="not_happened", evidence="no charge at the bank")
    CheckAttempt.objects.create(session_id="attempt", call_id="c1", pattern="charge_card", at=timezone.now(), status=503, error="busy")
    Session.objects.filter(pk="held").update(repeated_failures_at=timezone.now())
    session_with_calls("deleted")
    project = Session.objects.get(pk="deleted").project_id
    delete_session(session_id="deleted")
    everyone = ["verdict", "attempt", "held", "untouched"]
    assert selectors.sessions_annotated_since(session_ids=everyone, since=since) == {"verdict", "attempt", "held"}
    assert selectors.sessions_annotated_since(session_ids=["untouched", "held"], since=since) == {"held"}
    assert selectors.sessions_annotated_since(session_ids=everyone, since=since + timedelta(hours=1)) == set()
    assert selectors.sessions_deleted_since(projects=[project], since=since) == ["deleted"]
    assert selectors.sessions_deleted_since(projects=[project + 1000], since=since) == []
    assert selectors.sessions_deleted_since(projects=[project], since=since + timedelta(hours=1)) == []
