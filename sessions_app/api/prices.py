"""A project's model prices over HTTP (api.md, "Prices"): its own prices and the models its calls used with the
price charged now, and its admins' changes (services/prices.py). Rates are USD per million tokens, as decimal
strings; `valid_from` a whole UTC hour.
"""

from __future__ import annotations

from typing import Literal

from ninja import Field, Router, Schema, Status
from pydantic import StrictFloat, StrictInt, StrictStr

from sessions_app.api.schemas import BODY_ERRORS, ErrorOut
from sessions_app.log import pricing
from sessions_app.log.events import format_time
from sessions_app.selectors import access
from sessions_app.selectors import prices as price_reads
from sessions_app.services import prices

router = Router(tags=["prices"])
Rate = StrictStr | StrictInt | StrictFloat
RATE = "USD per million tokens: a decimal string (or a number) of at least 0 with at most 6 places"


class RatesOut(Schema):
    input: str
    output: str
    cache_read: str | None = Field(..., description="null: the input rate")
    cache_write: str | None = Field(..., description="null: the input rate")
    reasoning: str | None = Field(..., description="null: the output rate")


class PriceOut(RatesOut):
    model: str
    provider: str = Field(..., description="empty: any provider of the model")
    valid_from: str = Field(..., description="the whole UTC hour it applies from")


class UsedModelOut(Schema):
    model: str
    provider: str
    calls: int = Field(..., description="the project's model calls of it that carried usage")
    priced_by: Literal["project", "bundled", "none"] = Field(..., description="which price a call made now is charged")
    price: RatesOut | None = Field(..., description="that price's rates; null when none applies")


class PricesOut(Schema):
    prices: list[PriceOut]
    models: list[UsedModelOut]


class PriceKeyIn(Schema):
    model: StrictStr
    provider: StrictStr = Field("", description="empty or absent: any provider of the model")
    valid_from: StrictStr = Field(..., description="a whole UTC hour, ISO 8601 with an offset, such as 2026-11-02T10:00:00Z")


class PriceIn(PriceKeyIn):
    input: Rate = Field(..., description=RATE)
    output: Rate = Field(..., description=RATE)
    cache_read: Rate | None = Field(None, description=f"{RATE}; absent or null: the input rate")
    cache_write: Rate | None = Field(None, description=f"{RATE}; absent or null: the input rate")
    reasoning: Rate | None = Field(None, description=f"{RATE}; absent or null: the output rate")


def rates_to_wire(price: pricing.Price) -> dict:
    return {name: None if getattr(price, name) is None else pricing.text(getattr(price, name)) for name in prices.RATES}


def price_to_wire(price: pricing.Price) -> dict:
    return {"model": price.model, "provider": price.provider, "valid_from": format_time(price.valid_from), **rates_to_wire(price)}


@router.get("/projects/{slug}/prices", response={200: PricesOut, 404: ErrorOut})
def project_prices(request, slug: str):
    """The project's own prices, and each model its calls used with the price a call of it made now is charged."""
    project = access.project_for(access.actor_of(request), slug, access.READ)
    own = [price_to_wire(price_reads.price_of(row)) for row in price_reads.project_prices(project)]
    used = [
        {"model": m.model, "provider": m.provider, "calls": m.calls, "priced_by": m.priced_by,
         "price": rates_to_wire(m.own or m.bundled) if m.priced_by != "none" else None}
        for m in price_reads.used_models(project)
    ]  # fmt: skip
    return {"prices": own, "models": used}


@router.put("/projects/{slug}/prices", response={200: PriceOut, 403: ErrorOut, 404: ErrorOut, **BODY_ERRORS})
def set_price(request, slug: str, payload: PriceIn):
    """Set the project's price of a model from an hour on, replacing one of the same model, provider and hour (admins)."""
    row = prices.set_price(actor=access.actor_of(request), project_slug=slug, **payload.dict())
    return price_to_wire(price_reads.price_of(row))


@router.delete("/projects/{slug}/prices", response={204: None, 403: ErrorOut, 404: ErrorOut, **BODY_ERRORS})
def remove_price(request, slug: str, payload: PriceKeyIn):
    """Remove the project's price of a model (and provider) valid from an hour (admins)."""
    prices.remove_price(actor=access.actor_of(request), project_slug=slug, **payload.dict())
    return Status(204, None)
