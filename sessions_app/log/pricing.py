"""What a model call's tokens cost (api.md, "Usage and cost"): pure, no Django.

A project's own price for the model wins, the latest one valid at the call's hour; else the bundled
`genai-prices` data, by provider, model and time (its data ships with the package: no network). Tokens
of each kind are priced at their own rate: cache reads and writes at theirs (the input rate when a
project's price names none), reasoning at the output rate unless the price names its own.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime
from decimal import Decimal

import genai_prices
from genai_prices import data_snapshot
import genai_prices.types

from .usage import Usage

MILLION = Decimal(1_000_000)
# A cost is kept and shown to this many decimal places (api.md: at most 6).
PLACES = Decimal("0.000001")
CURRENCY = "USD"
# What a stored cost was computed with: when this or a project's prices change, stored costs are recomputed.
BUNDLED = f"genai-prices {genai_prices.__version__}"
NO_MODEL = "(no model)"


@dataclass(frozen=True, slots=True)
class Price:
    """A project's price of one model, per million tokens of each kind, valid from `valid_from` (a whole UTC hour)."""

    model: str
    valid_from: datetime
    input: Decimal
    output: Decimal
    cache_read: Decimal | None = None
    cache_write: Decimal | None = None
    reasoning: Decimal | None = None
    # Empty: any provider of the model.
    provider: str = ""

    def cost(self, usage: Usage) -> Decimal:
        cache_read = self.input if self.cache_read is None else self.cache_read
        cache_write = self.input if self.cache_write is None else self.cache_write
        reasoning = self.output if self.reasoning is None else self.reasoning
        uncached = max(usage.input_tokens - usage.cache_read_tokens - usage.cache_write_tokens, 0)
        answered = max(usage.output_tokens - usage.reasoning_tokens, 0)
        return (
            uncached * self.input + usage.cache_read_tokens * cache_read + usage.cache_write_tokens * cache_write
            + answered * self.output + usage.reasoning_tokens * reasoning
        ) / MILLION


class Pricer:
    """Prices usages at their hours, with a project's own prices first; remembers each (model, provider, hour)'s price."""

    def __init__(self, overrides: Iterable[Price] = ()):
        self._overrides: dict[str, list[Price]] = {}
        for price in sorted(overrides, key=lambda p: p.valid_from):
            self._overrides.setdefault(price.model, []).append(price)

    def override(self, model: str | None, provider: str | None, at: datetime) -> Price | None:
        """The project's price valid at `at` for the model (one naming the provider wins over one for any)."""
        valid = [p for p in self._overrides.get(model or "", ()) if p.valid_from <= at and p.provider in ("", provider or "")]
        if not valid:
            return None
        return max(valid, key=lambda p: (p.valid_from, p.provider != ""))

    def cost(self, usage: Usage, at: datetime) -> Decimal | None:
        """What `usage` cost at `at`'s hour (prices are valid by whole hours), in USD, not rounded; None when its
        model cannot be priced."""
        at = at.replace(minute=0, second=0, microsecond=0)
        if not usage.input_tokens and not usage.output_tokens:
            return Decimal(0)
        if (price := self.override(usage.model, usage.provider, at)) is not None:
            return price.cost(usage)
        if not usage.model:
            return None
        return bundled_cost(usage, at)


def bundled_cost(usage: Usage, at: datetime) -> Decimal | None:
    """The bundled data's price (genai-prices: input tokens count the cache, output counts reasoning, as ours), at
    `at`'s hour. Below a tiered price's first threshold, every price is linear in the tokens: its rates are read
    once per model, provider and hour (genai-prices' own calculation costs 70 to 250 µs a call, on every append
    with usage); past it, the call is calculated on its own."""
    hour = at.replace(minute=0, second=0, microsecond=0)
    found = _bundled_rates(usage.model or "", (usage.provider or "").lower(), hour)
    if found is None:
        return None
    base, price, tiered_above = found
    if tiered_above is not None and usage.input_tokens > tiered_above:
        return _calc(usage, hour)
    return base + price.cost(usage)


@functools.lru_cache(maxsize=4096)
def _bundled_rates(model: str, provider: str, hour: datetime) -> tuple[Decimal, Price, int | None] | None:
    """The model's price at the hour: a call's own price, its rates per million tokens of each kind (of the first
    tier), and the input tokens above which a tier applies (None: untiered); None when the data does not know it."""
    zero = _calculation(Usage(model=model, provider=provider), hour)
    if zero is None:
        return None
    tiers = [tier.start for value in vars(zero.model_price).values() if isinstance(value, genai_prices.types.TieredPrices) for tier in value.tiers]
    base = Decimal(zero.total_price)
    rates = {}
    for kind, counts in _PROBES.items():
        # One token of the kind: below every tier (a tier applies above its start in input tokens).
        found = _calculation(Usage(**counts, model=model, provider=provider), hour)
        if found is None:
            return None
        rates[kind] = (Decimal(found.total_price) - base) * MILLION
    return base, Price(model=model, provider=provider, valid_from=hour, **rates), min(tiers) if tiers else None


_PROBES = {
    "input": {"input_tokens": 1}, "output": {"output_tokens": 1},
    "cache_read": {"input_tokens": 1, "cache_read_tokens": 1}, "cache_write": {"input_tokens": 1, "cache_write_tokens": 1},
}  # fmt: skip


def _calc(usage: Usage, at: datetime) -> Decimal | None:
    found = _calculation(usage, at)
    return None if found is None else Decimal(found.total_price)


def _calculation(usage: Usage, at: datetime):
    counts = genai_prices.Usage(
        input_tokens=usage.input_tokens, output_tokens=usage.output_tokens,
        cache_read_tokens=usage.cache_read_tokens, cache_write_tokens=usage.cache_write_tokens,
    )
    provider = (usage.provider or "").lower() or None
    # A provider the data does not know at all (a gateway, a cloud's own name) still leaves the model's own price;
    # a provider it knows prices the model as that provider does, or not at all.
    try:
        return genai_prices.calc_price(
            counts, usage.model or "", provider_id=provider if provider in _KNOWN_PROVIDERS else None, genai_request_timestamp=at
        )
    except (LookupError, ValueError):
        return None


_KNOWN_PROVIDERS = frozenset(provider.id for provider in data_snapshot.get_snapshot().providers)


def bundled_price(model: str, provider: str | None, at: datetime) -> Price | None:
    """The bundled data's rates for the model at `at`'s hour, per million tokens of each kind (a tiered price's
    first), as a Price for showing beside a project's own; None when the data does not know the model."""
    found = _bundled_rates(model, (provider or "").lower(), at.replace(minute=0, second=0, microsecond=0))
    return None if found is None else replace(found[1], model=model, provider=provider or "")


def rounded(cost: Decimal) -> Decimal:
    return cost.quantize(PLACES)


def text(cost: Decimal) -> str:
    """A cost as api.md writes it: a decimal string with at most 6 places, no trailing zeros, "0" for nothing."""
    value = rounded(cost).normalize()
    return "0" if value == 0 else format(value, "f")


@dataclass(frozen=True, slots=True)
class Bill:
    """Usage summed over model calls and priced (api.md's `usage` object): counts by kind, the models in order of
    first use, the priced part's cost, and the models that could not be priced (`(no model)` for none named)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    models: tuple[str, ...] = ()
    cost: Decimal = Decimal(0)
    unpriced: tuple[str, ...] = ()

    @property
    def priced(self) -> bool:
        return not self.unpriced

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def as_api(self) -> dict:
        return {
            "input_tokens": self.input_tokens, "output_tokens": self.output_tokens,
            "cache_read_tokens": self.cache_read_tokens, "cache_write_tokens": self.cache_write_tokens,
            "reasoning_tokens": self.reasoning_tokens, "models": list(self.models),
            "cost": text(self.cost), "currency": CURRENCY, "priced": self.priced, "unpriced": list(self.unpriced),
        }  # fmt: skip


def bill(calls: Iterable[tuple[Usage, datetime]], pricer: Pricer) -> Bill:
    """Sum and price usages, each at its own time (in order of use: the models keep the order they were first used)."""
    counts = dict.fromkeys(("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens"), 0)
    models: dict[str, None] = {}
    unpriced: dict[str, None] = {}
    cost = Decimal(0)
    for usage, at in calls:
        for kind in counts:
            counts[kind] += getattr(usage, kind)
        if usage.model:
            models.setdefault(usage.model)
        price = pricer.cost(usage, at)
        if price is None:
            unpriced.setdefault(usage.model or NO_MODEL)
        else:
            cost += price
    return Bill(**counts, models=tuple(models), cost=rounded(cost), unpriced=tuple(unpriced))
