"""prices.py over HTTP: GET /api/v1/projects/{slug}/prices, and a project admin's PUT and DELETE of its prices."""

import json

import pytest

from sessions_app.models import ModelPrice, Project, Role
from tests.access import member
from tests.conftest import ApiClient
from tests.sessions_app import factories as f
from tests.sessions_app.api.http import append, assert_error, make_session

pytestmark = pytest.mark.django_db

PRICES = "/api/v1/projects/default/prices"
PRICE = {"model": "house-9", "valid_from": "2026-11-02T10:00:00Z", "input": "2", "output": 8}


def logged_in(user) -> ApiClient:
    """The API with a login session (the browser's): tokens never carry the admin capability."""
    client = ApiClient(None)
    client.client.force_login(user)
    return client


def send(client: ApiClient, method: str, body, slug: str = "default"):
    call = getattr(client.client, method)
    return call(f"/api/v1/projects/{slug}/prices", json.dumps(body), content_type="application/json", headers=client.headers)


@pytest.fixture
def admin(django_user_model) -> ApiClient:
    user = django_user_model.objects.create_user("boss")
    member(user, Role.ADMIN)
    return logged_in(user)


def test_prices_lists_the_project_s_own_and_each_model_used_with_its_price_now(api, admin):
    make_session(api, "s")
    usage = {"input_tokens": 10, "output_tokens": 1}
    events = [f.assistant("a", metadata={"usage": usage, "model": model}) for model in ("gpt-4o", "house-9", "mystery-1")]
    assert append(api, "s", events).status_code == 201
    assert send(admin, "put", PRICE | {"cache_read": "0.5"}).status_code == 200
    body = api.get(PRICES).json()
    assert body["prices"] == [{"model": "house-9", "provider": "", "valid_from": "2026-11-02T10:00:00Z",
                               "input": "2", "output": "8", "cache_read": "0.5", "cache_write": None, "reasoning": None}]  # fmt: skip
    models = {m["model"]: m for m in body["models"]}
    assert models["gpt-4o"]["priced_by"] == "bundled" and models["gpt-4o"]["price"]["input"] == "2.5"
    assert models["house-9"]["priced_by"] == "project" and models["house-9"]["price"]["output"] == "8"
    assert models["mystery-1"] == {"model": "mystery-1", "provider": "", "calls": 1, "priced_by": "none", "price": None}


def test_put_replaces_the_price_of_the_same_hour_and_delete_removes_it(admin):
    assert send(admin, "put", PRICE).json()["input"] == "2"
    changed = send(admin, "put", PRICE | {"input": 3.25, "valid_from": "2026-11-02T11:00:00+01:00"})
    assert changed.status_code == 200 and changed.json()["input"] == "3.25" and ModelPrice.objects.count() == 1
    key = {"model": "house-9", "valid_from": "2026-11-02T10:00:00Z"}
    assert send(admin, "delete", key).status_code == 204 and not ModelPrice.objects.exists()
    assert_error(send(admin, "delete", key), 404, "not_found")
    assert Project.default().prices_version == 3


@pytest.mark.parametrize(
    ("change", "field", "reason"),
    [
        ({"valid_from": "2026-11-02T10:30:00Z"}, "valid_from", "not_whole_hour"),
        ({"input": "-0.5"}, "input", "negative"),
        ({"output": "1.1234567"}, "output", "too_precise"),
        ({"model": ""}, "model", "empty"),
    ],
)
def test_bad_input_is_refused_422_naming_the_field(admin, change, field, reason):
    body = assert_error(send(admin, "put", PRICE | change), 422, "invalid_price")
    assert (body["field"], body["reason"]) == (field, reason) and not ModelPrice.objects.exists()


def test_a_body_of_the_wrong_shape_is_refused_422_saying_where(admin):
    body = assert_error(send(admin, "put", {k: v for k, v in PRICE.items() if k != "output"}), 422)
    assert "output" in body["detail"]
    body = assert_error(send(admin, "put", PRICE | {"input": [1]}), 422)
    assert "input" in body["detail"] and not ModelPrice.objects.exists()


def test_a_token_and_a_member_below_admin_may_read_but_not_change(api, django_user_model):
    assert api.get(PRICES).status_code == 200
    assert_error(send(api, "put", PRICE), 403, "forbidden")
    operator = django_user_model.objects.create_user("op")
    member(operator, Role.OPERATOR)
    assert_error(send(logged_in(operator), "put", PRICE), 403, "forbidden")
    assert_error(send(logged_in(operator), "delete", {"model": "m", "valid_from": "2026-11-02T10:00:00Z"}), 403, "forbidden")
    assert_error(send(api, "put", PRICE, slug="nowhere"), 404, "not_found")
    assert not ModelPrice.objects.exists()
