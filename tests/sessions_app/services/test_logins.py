"""Every end of a login is told to the open streams' checks in every process (services.logins): through
the channel layer's credentials group, once the change commits, whatever path made it."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from importlib import import_module

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.contrib.sessions.models import Session as LoginSession
from django.db import connection, transaction
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from sessions_app import services
from sessions_app.models import ApiToken
from tests.access import token_for
from tests.sessions_app.services.test_publishing import Subscriber

pytestmark = pytest.mark.django_db(transaction=True)

ENDED = {"type": "credentials_ended"}


@pytest.fixture
def told():
    """What the credentials group hears (read with .drain())."""
    subscriber = Subscriber.__new__(Subscriber)
    subscriber.layer = get_channel_layer()
    subscriber.channel = async_to_sync(subscriber.layer.new_channel)()
    async_to_sync(subscriber.layer.group_add)(services.CREDENTIALS_GROUP, subscriber.channel)
    return subscriber


@pytest.fixture
def person(django_user_model):
    return django_user_model.objects.create_user("person", password="old-horse-battery")


def logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_the_session_engine_is_djangos_database_store_so_logins_outlive_the_change(person):
    """The same rows, keys and signing as django.contrib.sessions.backends.db: no login ends for the switch."""
    from django.contrib.sessions.backends.db import SessionStore as DjangoStore

    client = logged_in(person)
    key = client.cookies[settings.SESSION_COOKIE_NAME].value
    store = import_module(settings.SESSION_ENGINE).SessionStore
    assert store.get_model_class() is LoginSession
    assert store(key).load() == DjangoStore(key).load() != {}


def test_a_logout_is_told_once(told, person):
    client = logged_in(person)
    key = client.cookies[settings.SESSION_COOKIE_NAME].value
    told.drain()
    assert client.post("/logout/").status_code == 302
    assert not LoginSession.objects.filter(pk=key).exists()
    assert told.drain() == [ENDED]


def test_the_admins_logout_is_told_too(told, django_user_model):
    client = logged_in(django_user_model.objects.create_superuser("admin"))
    key = client.cookies[settings.SESSION_COOKIE_NAME].value
    told.drain()
    assert client.post("/admin/logout/").status_code == 302
    assert not LoginSession.objects.filter(pk=key).exists()
    assert told.drain() == [ENDED]


@pytest.mark.parametrize("change", ["password", "is_active"])
def test_a_saved_password_or_deactivation_is_told_on_commit(told, person, change):
    with transaction.atomic():
        if change == "password":
            person.set_password("a-new-horse-battery")
        else:
            person.is_active = False
        person.save()
        assert told.drain() == [], "not before the commit"
    assert told.drain() == [ENDED]


def test_a_rolled_back_change_is_not_told(told, person):
    with pytest.raises(RuntimeError), transaction.atomic():
        person.is_active = False
        person.save()
        raise RuntimeError("rolled back")
    assert told.drain() == []


def test_a_login_and_a_new_user_are_not_told(told, django_user_model):
    """A login saves only last_login; a new user has no streams yet."""
    django_user_model.objects.create_user("newcomer", password="old-horse-battery")
    client = Client()
    assert client.post("/login/", {"username": "newcomer", "password": "old-horse-battery"}).status_code == 302
    assert told.drain() == []


def test_a_deleted_user_is_told(told, person):
    person.delete()
    assert told.drain() == [ENDED]


def test_a_revoked_token_is_told_once(told, person):
    token = ApiToken.usable_for(token_for(person))
    told.drain()
    assert services.revoke_token(token=token)
    assert not services.revoke_token(token=token), "already revoked: nothing changed, nothing told"
    assert told.drain() == [ENDED]


def test_clearing_expired_sessions_stays_one_delete_and_tells_nothing(told, person):
    """A receiver of the session model's deletions would have made clearsessions load every row and tell each one."""
    for _ in range(3):
        logged_in(person)
    LoginSession.objects.update(expire_date=timezone.now() - timedelta(seconds=1))
    told.drain()
    with CaptureQueriesContext(connection) as queries:
        import_module(settings.SESSION_ENGINE).SessionStore.clear_expired()
    statements = [q["sql"].split()[0].upper() for q in queries.captured_queries]
    assert [s for s in statements if s not in ("BEGIN", "COMMIT", "SAVEPOINT", "RELEASE")] == ["DELETE"], statements
    assert LoginSession.objects.count() == 0
    assert told.drain() == []


def test_a_layer_that_does_not_answer_holds_a_logout_back_half_a_second_at_most(person, monkeypatch):
    """A Redis that does not answer (a connect to a host that is gone waits 3 s): the logout answers, the periodic checks remain."""

    async def unanswered(group, message):
        await asyncio.sleep(30)

    monkeypatch.setattr(get_channel_layer(), "group_send", unanswered)
    client = logged_in(person)
    key = client.cookies[settings.SESSION_COOKIE_NAME].value
    started = time.monotonic()
    assert client.post("/logout/").status_code == 302
    assert time.monotonic() - started < 1.0
    assert not LoginSession.objects.filter(pk=key).exists()
