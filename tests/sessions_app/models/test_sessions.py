"""The model layer refuses every change to a stored event."""

import pytest
from django.db.models import ProtectedError
from django.utils import timezone

from sessions_app.models import AppendOnlyViolation, Event, Project, Session

pytestmark = pytest.mark.django_db


@pytest.fixture
def stored_event():
    session = Session.objects.create(id="s1", project=Project.default())
    return Event.objects.create(session=session, seq=0, type="user_message", time=timezone.now(), data={"content": "hi"})


def test_saving_a_stored_event_again_is_refused(stored_event):
    stored_event.data = {"content": "rewritten"}
    with pytest.raises(AppendOnlyViolation):
        stored_event.save()
    assert Event.objects.get().data == {"content": "hi"}


def test_deleting_an_event_is_refused(stored_event):
    with pytest.raises(AppendOnlyViolation):
        stored_event.delete()
    assert Event.objects.count() == 1


@pytest.mark.parametrize(
    "change",
    [
        lambda events: events.update(type="assistant_message"),
        lambda events: events.delete(),
        lambda events: events.bulk_update(list(events), ["type"]),
        lambda events: events.update_or_create(seq=0, defaults={"type": "assistant_message"}),
    ],
)
def test_queryset_changes_are_refused(stored_event, change):
    with pytest.raises(AppendOnlyViolation):
        change(Event.objects.all())
    assert Event.objects.get().type == "user_message"


def test_a_session_with_events_cannot_be_deleted(stored_event):
    with pytest.raises(ProtectedError):
        stored_event.session.delete()
    assert Event.objects.count() == 1


def test_a_duplicate_seq_is_refused_by_the_database(stored_event):
    from django.db import IntegrityError, transaction

    with pytest.raises(IntegrityError), transaction.atomic():
        Event.objects.create(session=stored_event.session, seq=0, type="user_message", time=timezone.now(), data={})


def statuses_by_filter() -> dict[str, str]:
    """Each session's status as the list filter (SQL) sees it."""
    from sessions_app import selectors

    found = {}
    for status in selectors.STATUSES:
        for session_id in Session.objects.filter(selectors.status_filter(status)).values_list("id", flat=True):
            assert session_id not in found, f"{session_id} matches both {found[session_id]} and {status}"
            found[session_id] = status
    return found


def test_status_tells_a_session_written_to_between_turns_from_a_quiet_one(django_user_model):
    from datetime import timedelta

    from sessions_app import services
    from sessions_app.log.events import validate_batch
    from tests.sessions_app.log.test_recovery import WORKED_EXAMPLE
    from tests.sessions_app.services.test_recovery import store

    def append(session_id, items):
        services.append_events(session_id=session_id, events=validate_batch([{"type": t, "data": d} for t, d in items]))

    now = timezone.now()
    services.create_session(session_id="empty")
    append(services.create_session(session_id="between-turns").id, [("user_message", {"content": "hi"})])
    store([("user_message", {"content": "hi"})], session_id="quiet")  # its events are from January
    append(services.create_session(session_id="mid-turn").id, [("turn_start", {"turn": 1})])
    store(WORKED_EXAMPLE, session_id="crashed")
    store(WORKED_EXAMPLE, session_id="just-recovered")
    services.recover(session_id="just-recovered", user=django_user_model.objects.create_user("ops"))
    store(WORKED_EXAMPLE, session_id="back-after-recovery")
    services.recover(session_id="back-after-recovery", user=django_user_model.objects.get(username="ops"))
    append("back-after-recovery", [("user_message", {"content": "are you there?"})])
    Session.objects.filter(pk="back-after-recovery").update(recovered_at=now - timedelta(seconds=30))

    expected = {
        "empty": "clean",
        "between-turns": "active",
        "quiet": "clean",
        "mid-turn": "running",
        "crashed": "stalled",
        "just-recovered": "recovered",
        "back-after-recovery": "active",
    }
    assert {s.id: s.status for s in Session.objects.all()} == expected
    assert statuses_by_filter() == expected
