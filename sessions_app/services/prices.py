"""A project's own model prices, set and removed by its admins (its Prices page, the API): each change checked,
audited (`project_changed`, field `price`), and moving `Project.prices_version` in the same transaction, so the
worker prices the project's stored costs again (services/usage.py recompute_costs) within a round.

A price is per million tokens of each kind, valid from a whole UTC hour on (calls are priced by their event's
hour); input and output are required, an empty cache read, cache write or reasoning rate means the input
(cache) or output (reasoning) rate (sessions_app/log/pricing.py).
"""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation

from django.db import transaction
from django.db.models import F

from sessions_app.lib.errors import InvalidPrice, PriceNotFound
from sessions_app.log import events as log_events
from sessions_app.models import AuditEntry, ModelPrice, Project
from sessions_app.selectors import access

from .audit_log import audit

MODEL_MAX = ModelPrice._meta.get_field("model").max_length
PROVIDER_MAX = ModelPrice._meta.get_field("provider").max_length
RATES = ("input", "output", "cache_read", "cache_write", "reasoning")
OPTIONAL_RATES = ("cache_read", "cache_write", "reasoning")
PLACES = ModelPrice._meta.get_field("input").decimal_places
# The column's digits less its places: a rate below 10^8 dollars per million tokens.
RATE_LIMIT = Decimal(10) ** (ModelPrice._meta.get_field("input").max_digits - PLACES)


def _text(field: str, value: object, *, most: int, least: int = 0) -> str:
    if not isinstance(value, str):
        raise InvalidPrice(field, "not_text", f"{field} must be a string, not {log_events.show_json(value)}")
    value = value.strip()
    if "\x00" in value:
        raise InvalidPrice(field, "invalid_text", f"{field} holds NUL, which is not allowed")
    if len(value) > most:
        raise InvalidPrice(field, "too_long", f"{field} has {len(value)} characters; at most {most}")
    if len(value) < least:
        raise InvalidPrice(field, "empty", f"{field} is empty: name the model as its calls' metadata names it")
    return value


def checked_model(model: object) -> str:
    return _text("model", model, most=MODEL_MAX, least=1)


def checked_provider(provider: object) -> str:
    return _text("provider", "" if provider is None else provider, most=PROVIDER_MAX)


def checked_valid_from(value: object) -> datetime:
    """A whole UTC hour, as an aware datetime or an ISO 8601 string with an offset (prices are valid by hour)."""
    try:
        moment = log_events.coerce_time(value)
    except (ValueError, OverflowError) as bad:
        raise InvalidPrice(
            "valid_from", "invalid_time", f"valid_from must be an ISO 8601 date-time with a UTC offset, such as 2026-11-02T10:00:00Z: {bad}"
        ) from None
    if (moment.minute, moment.second, moment.microsecond) != (0, 0, 0):
        raise InvalidPrice(
            "valid_from", "not_whole_hour",
            f"valid_from {log_events.format_time(moment)} is not a whole UTC hour: a price is valid from the start of an hour"
            f" (in UTC), such as {log_events.format_time(moment.replace(minute=0, second=0, microsecond=0))}",
        )  # fmt: skip
    return moment.astimezone(UTC)


def checked_rate(field: str, value: object, *, required: bool) -> Decimal | None:
    """Dollars per million tokens: a non-negative decimal (a string or a JSON number) with at most 6 places."""
    if value is None or value == "":
        if required:
            raise InvalidPrice(field, "missing", f"{field} is required: the price in USD per million {field} tokens")
        return None
    if isinstance(value, bool) or not isinstance(value, str | int | float | Decimal):
        raise InvalidPrice(field, "not_decimal", f"{field} must be a decimal (a string such as \"2.5\", or a number), not {log_events.show_json(value)}")
    try:
        rate = Decimal(str(value).strip() if isinstance(value, str | float) else value)
    except InvalidOperation:
        raise InvalidPrice(field, "not_decimal", f"{field} {log_events.show_json(value)} is not a decimal such as \"2.5\"") from None
    if not rate.is_finite():
        raise InvalidPrice(field, "not_decimal", f"{field} must be a finite decimal, not {value}")
    if rate < 0:
        raise InvalidPrice(field, "negative", f"{field} must be at least 0, not {value}")
    if rate != rate.quantize(Decimal(1).scaleb(-PLACES), rounding="ROUND_DOWN"):
        raise InvalidPrice(field, "too_precise", f"{field} {value} has more than {PLACES} decimal places")
    if rate >= RATE_LIMIT:
        raise InvalidPrice(field, "too_large", f"{field} {value} is too large: below {RATE_LIMIT:,} USD per million tokens")
    return rate.quantize(Decimal(1).scaleb(-PLACES))


def price_detail(row: ModelPrice | None) -> dict | None:
    """A price as the audit log and the API write it: rates as decimal strings (None: the fallback rate)."""
    if row is None:
        return None
    return {name: None if getattr(row, name) is None else rate_text(getattr(row, name)) for name in RATES}


def rate_text(rate: Decimal) -> str:
    value = Decimal(rate).normalize()
    return "0" if value == 0 else format(value, "f")


def _locked_project(actor: access.Actor, project_slug: str) -> Project:
    project = access.project_for(actor, project_slug, access.ADMIN)
    # Held to the transaction's end: changes of one project's prices, and their versions, queue.
    Project.objects.select_for_update().filter(pk=project.pk).values_list("pk", flat=True).get()
    return project


def _changed(project: Project, actor: access.Actor, key: tuple[str, str, datetime], before: dict | None, after: dict | None) -> None:
    model, provider, valid_from = key
    Project.objects.filter(pk=project.pk).update(prices_version=F("prices_version") + 1)
    audit(
        project=project, actor=actor.user, action=AuditEntry.PROJECT_SETTINGS_CHANGED, target=project.slug,
        detail={"field": "price", "model": model, "provider": provider, "valid_from": log_events.format_time(valid_from),
                "before": before, "after": after},
    )  # fmt: skip


def set_price(
    *,
    actor: access.Actor,
    project_slug: str,
    model: object,
    provider: object = "",
    valid_from: object,
    input: object,
    output: object,
    cache_read: object = None,
    cache_write: object = None,
    reasoning: object = None,
) -> ModelPrice:
    """Set the project's price of `model` (of `provider`; empty: any) from the hour `valid_from` on, replacing one
    set for that same model, provider and hour. InvalidPrice (field, reason) for bad input, nothing stored;
    ProjectNotFound / Forbidden as access.project_for (project admins only)."""
    key = (checked_model(model), checked_provider(provider), checked_valid_from(valid_from))
    given = {"input": input, "output": output, "cache_read": cache_read, "cache_write": cache_write, "reasoning": reasoning}
    rates = {name: checked_rate(name, value, required=name not in OPTIONAL_RATES) for name, value in given.items()}
    with transaction.atomic():
        project = _locked_project(actor, project_slug)
        row = ModelPrice.objects.filter(project=project, model=key[0], provider=key[1], valid_from=key[2]).first()
        before = price_detail(row)
        if row is None:
            row = ModelPrice(project=project, model=key[0], provider=key[1], valid_from=key[2], created_by=_user(actor))
        for name, rate in rates.items():
            setattr(row, name, rate)
        if before != price_detail(row):
            row.save()
            _changed(project, actor, key, before, price_detail(row))
    return row


def remove_price(*, actor: access.Actor, project_slug: str, model: object, provider: object = "", valid_from: object) -> None:
    """Remove the project's price of `model` (of `provider`) valid from `valid_from`; PriceNotFound when it has none."""
    key = (checked_model(model), checked_provider(provider), checked_valid_from(valid_from))
    with transaction.atomic():
        project = _locked_project(actor, project_slug)
        row = ModelPrice.objects.filter(project=project, model=key[0], provider=key[1], valid_from=key[2]).first()
        if row is None:
            raise PriceNotFound(project.slug, *key)
        before = price_detail(row)
        row.delete()
        _changed(project, actor, key, before, None)


def _user(actor: access.Actor):
    user = actor.user
    return user if user is not None and user.is_authenticated else None
