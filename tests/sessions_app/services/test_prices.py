"""services.prices: who sets and removes a project's model prices, what is refused (and stores nothing), what a
change records, and that every change moves the project's prices version (so stored costs are priced again)."""

from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal

import pytest

from sessions_app.lib.errors import InvalidPrice, PriceNotFound
from sessions_app.models import AuditEntry, ModelPrice, Project, Role
from sessions_app.selectors import access
from sessions_app.selectors import prices as price_reads
from sessions_app.services import prices
from tests.access import member

pytestmark = pytest.mark.django_db

HOUR = datetime(2026, 11, 2, 10, tzinfo=UTC)


@pytest.fixture
def admin(django_user_model) -> access.Actor:
    user = django_user_model.objects.create_user("alice")
    member(user, Role.ADMIN)
    return access.Actor(user=user)


def version() -> int:
    return Project.objects.get(slug="default").prices_version


def test_an_admin_sets_a_price_and_each_change_moves_the_version_and_is_audited(admin):
    row = prices.set_price(actor=admin, project_slug="default", model="house-9", valid_from=HOUR, input="2.5", output=10)
    assert (row.input, row.output, row.cache_read, row.provider, row.created_by) == (Decimal("2.5"), Decimal(10), None, "", admin.user)
    assert version() == 1
    prices.set_price(actor=admin, project_slug="default", model="house-9", valid_from=HOUR, input="2.5", output=10, cache_read="0.25")
    assert ModelPrice.objects.get().cache_read == Decimal("0.25") and version() == 2
    prices.remove_price(actor=admin, project_slug="default", model="house-9", valid_from=HOUR)
    assert not ModelPrice.objects.exists() and version() == 3
    details = [e.detail for e in AuditEntry.objects.filter(action=AuditEntry.PROJECT_SETTINGS_CHANGED).order_by("id")]
    assert [(d["field"], d["model"], d["valid_from"]) for d in details] == [("price", "house-9", "2026-11-02T10:00:00Z")] * 3
    assert details[0]["before"] is None and details[0]["after"]["input"] == "2.5" and details[0]["after"]["cache_read"] is None
    assert details[1]["after"]["cache_read"] == "0.25" and details[2]["after"] is None


def test_setting_the_same_price_again_changes_nothing(admin):
    for _ in range(2):
        prices.set_price(actor=admin, project_slug="default", model="m", valid_from=HOUR, input="1", output="2.000")
    assert version() == 1 and AuditEntry.objects.filter(action=AuditEntry.PROJECT_SETTINGS_CHANGED).count() == 1


def test_a_price_of_one_provider_and_of_any_are_two_prices(admin):
    prices.set_price(actor=admin, project_slug="default", model="m", provider="openai", valid_from=HOUR, input=1, output=1)
    prices.set_price(actor=admin, project_slug="default", model="m", valid_from=HOUR, input=2, output=2)
    assert sorted(ModelPrice.objects.values_list("provider", "input")) == [("", 2), ("openai", 1)]
    assert [(p.model, p.provider) for p in price_reads.project_prices(Project.default())] == [("m", ""), ("m", "openai")]


def test_an_instant_within_an_hour_is_refused_with_the_hour_it_meant(admin):
    with pytest.raises(InvalidPrice) as refused:
        prices.set_price(actor=admin, project_slug="default", model="m", valid_from="2026-11-02T10:30:00Z", input=1, output=1)
    assert (refused.value.field, refused.value.reason) == ("valid_from", "not_whole_hour")
    assert "2026-11-02T10:00:00Z" in refused.value.detail
    # A whole hour in another zone is a whole UTC hour only when its offset is whole hours.
    india = timezone(timedelta(hours=5, minutes=30))
    with pytest.raises(InvalidPrice):
        prices.set_price(actor=admin, project_slug="default", model="m", valid_from=datetime(2026, 11, 2, 10, tzinfo=india), input=1, output=1)
    row = prices.set_price(actor=admin, project_slug="default", model="m", valid_from="2026-11-02T12:00:00+02:00", input=1, output=1)
    assert row.valid_from == HOUR
    assert version() == 1


@pytest.mark.parametrize(
    ("given", "field", "reason"),
    [
        ({"valid_from": "yesterday"}, "valid_from", "invalid_time"),
        ({"valid_from": "2026-11-02T10:00:00"}, "valid_from", "invalid_time"),
        ({"model": ""}, "model", "empty"),
        ({"model": "x" * 201}, "model", "too_long"),
        ({"model": 7}, "model", "not_text"),
        ({"provider": "a\x00b"}, "provider", "invalid_text"),
        ({"input": None}, "input", "missing"),
        ({"output": ""}, "output", "missing"),
        ({"input": "-1"}, "input", "negative"),
        ({"input": "1.0000001"}, "input", "too_precise"),
        ({"output": "NaN"}, "output", "not_decimal"),
        ({"output": "Infinity"}, "output", "not_decimal"),
        ({"output": "ten"}, "output", "not_decimal"),
        ({"cache_read": True}, "cache_read", "not_decimal"),
        ({"reasoning": "100000000"}, "reasoning", "too_large"),
    ],
)
def test_bad_input_is_refused_naming_the_field_and_stores_nothing(admin, given, field, reason):
    values = {"model": "m", "valid_from": HOUR, "input": "1", "output": "2"} | given
    with pytest.raises(InvalidPrice) as refused:
        prices.set_price(actor=admin, project_slug="default", **values)
    assert (refused.value.field, refused.value.reason) == (field, reason)
    assert not ModelPrice.objects.exists() and version() == 0
    assert not AuditEntry.objects.filter(action=AuditEntry.PROJECT_SETTINGS_CHANGED).exists()


def test_only_admins_change_prices(django_user_model, admin):
    operator = django_user_model.objects.create_user("bob")
    member(operator, Role.OPERATOR)
    with pytest.raises(access.Forbidden):
        prices.set_price(actor=access.Actor(user=operator), project_slug="default", model="m", valid_from=HOUR, input=1, output=1)
    prices.set_price(actor=admin, project_slug="default", model="m", valid_from=HOUR, input=1, output=1)
    with pytest.raises(access.Forbidden):
        prices.remove_price(actor=access.Actor(user=operator), project_slug="default", model="m", valid_from=HOUR)
    with pytest.raises(access.ProjectNotFound):
        prices.set_price(actor=admin, project_slug="elsewhere", model="m", valid_from=HOUR, input=1, output=1)
    assert ModelPrice.objects.count() == 1 and version() == 1


def test_removing_a_price_the_project_does_not_have_says_so(admin):
    prices.set_price(actor=admin, project_slug="default", model="m", provider="openai", valid_from=HOUR, input=1, output=1)
    with pytest.raises(PriceNotFound, match="any provider"):
        prices.remove_price(actor=admin, project_slug="default", model="m", valid_from=HOUR)
    assert version() == 1
