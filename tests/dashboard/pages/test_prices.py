"""A project's Prices page (dashboard.pages.prices) through Django's test client: what every member reads (the models
used with the price charged, "no bundled price" for a model genai-prices does not know), what only admins change,
and bad input answered with the form saying what was wrong."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.test import Client

from sessions_app import services
from sessions_app.log.events import validate_batch
from sessions_app.models import ModelPrice, Project, Role
from tests.access import member
from tests.sessions_app import factories as f

pytestmark = pytest.mark.django_db

PAGE = "/projects/default/prices"


def logged_in(django_user_model, name: str, role: str) -> Client:
    user = django_user_model.objects.create_user(name)
    member(user, role)
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def admin(django_user_model):
    return logged_in(django_user_model, "alice", Role.ADMIN)


@pytest.fixture
def viewer(django_user_model):
    return logged_in(django_user_model, "vic", Role.VIEWER)


@pytest.fixture
def used():
    services.create_session(session_id="s", agent_name="bot")
    events = [f.assistant("a", metadata={"usage": {"input_tokens": 10, "output_tokens": 2}, "model": model}) for model in ("gpt-4o", "house-9")]
    services.append_events(session_id="s", events=validate_batch(events))


def row(page: str, css: str, model: str) -> str:
    found = re.search(rf'<tr class="{css}[^"]*" data-model="{re.escape(model)}"[^>]*>(.*?)</tr>', page, re.S)
    assert found, model
    return found.group(1)


def form(**values) -> dict:
    return {"model": "house-9", "provider": "", "valid_from_date": "2026-11-02", "valid_from_hour": "10", "input": "2", "output": "8"} | values


def test_a_viewer_reads_the_models_used_with_the_bundled_price_and_none_for_an_unknown_model(viewer, used):
    page = viewer.get(PAGE).content.decode()
    gpt = row(page, "used-model", "gpt-4o")
    assert "bundled" in gpt and ">2.5<" in gpt and ">10<" in gpt and ">1.25<" in gpt
    assert "no bundled price" in row(page, "used-model", "house-9") and "add one below" not in page
    assert 'class="price-form"' not in page and "The project's admins change them." in page


def test_an_admin_adds_a_price_from_a_date_and_hour_and_it_prices_the_model(admin, used):
    page = admin.get(PAGE).content.decode()
    assert 'type="date"' in page and '<option value="23">23:00</option>' in page and 'aria-current="page">Prices</a>' in page
    response = admin.post(PAGE, form(cache_read="0.5"))
    assert response.status_code == 302
    price = ModelPrice.objects.get()
    assert (price.valid_from, price.input, price.cache_read, price.reasoning) == (datetime(2026, 11, 2, 10, tzinfo=UTC), 2, Decimal("0.5"), None)
    assert Project.default().prices_version == 1
    page = admin.get(PAGE).content.decode()
    assert "Saved the price of house-9 from 2026-11-02 10:00 UTC" in page
    mine = re.search(r'<tr class="price-row"[^>]*>(.*?)</tr>', page, re.S).group(1)
    assert "2026-11-02 10:00" in mine and ">0.5<" in mine and "as output" in mine
    # Valid from a past hour: it prices the calls made now.
    assert "the project's" in row(page, "used-model", "house-9")


def test_an_admin_removes_a_price(admin):
    admin.post(PAGE, form())
    response = admin.post(PAGE, {"action": "remove", "model": "house-9", "provider": "", "valid_from": "2026-11-02T10:00:00Z"}, follow=True)
    assert not ModelPrice.objects.exists() and "Removed the price of house-9" in response.content.decode()
    again = admin.post(PAGE, {"action": "remove", "model": "house-9", "provider": "", "valid_from": "2026-11-02T10:00:00Z"}, follow=True)
    assert "nothing to remove" in again.content.decode() and Project.default().prices_version == 2


@pytest.mark.parametrize(
    ("values", "words"),
    [
        ({"input": "-1"}, "greater than or equal to 0"),
        ({"output": ""}, "This field is required"),
        ({"input": "0.0000001"}, "no more than 6 decimal places"),
        ({"valid_from_hour": "24"}, "Select a valid choice"),
        ({"valid_from_date": "tomorrow"}, "Enter a valid date"),
        ({"model": "a\x00b"}, "Null characters are not allowed"),
    ],
)
def test_bad_input_answers_422_with_the_form_saying_what_was_wrong_and_stores_nothing(admin, values, words):
    response = admin.post(PAGE, form(**values))
    assert response.status_code == 422 and words in response.content.decode()
    assert not ModelPrice.objects.exists() and Project.default().prices_version == 0


def test_a_member_who_is_not_an_admin_may_not_change_prices(django_user_model):
    operator = logged_in(django_user_model, "olga", Role.OPERATOR)
    assert operator.get(PAGE).status_code == 200
    assert operator.post(PAGE, form()).status_code == 403 and not ModelPrice.objects.exists()


def test_a_stranger_gets_404(django_user_model):
    stranger = Client()
    stranger.force_login(django_user_model.objects.create_user("eve"))
    assert stranger.get(PAGE).status_code == 404
