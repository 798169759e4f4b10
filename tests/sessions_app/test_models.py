"""The model layer refuses every change to a stored event."""

import pytest
from django.db.models import ProtectedError
from django.utils import timezone

from sessions_app.models import AppendOnlyViolation, Event, Session

pytestmark = pytest.mark.django_db


@pytest.fixture
def stored_event():
    session = Session.objects.create(id="s1")
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
