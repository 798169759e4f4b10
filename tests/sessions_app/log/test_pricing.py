"""log/pricing.py's bundled prices: the rates read once per model, provider and hour price every call as
genai-prices' own calculation does (tiered prices call by call), and the rates shown beside a project's own."""

from __future__ import annotations

import random
from datetime import UTC, datetime
from decimal import Decimal

import genai_prices
from genai_prices import data_snapshot

from sessions_app.log import pricing
from sessions_app.log.usage import Usage

AT = datetime(2026, 11, 2, 10, 42, tzinfo=UTC)


def genai_cost(usage: Usage) -> Decimal | None:
    try:
        found = genai_prices.calc_price(
            genai_prices.Usage(input_tokens=usage.input_tokens, output_tokens=usage.output_tokens,
                               cache_read_tokens=usage.cache_read_tokens, cache_write_tokens=usage.cache_write_tokens),
            usage.model, provider_id=usage.provider, genai_request_timestamp=AT.replace(minute=0),
        )  # fmt: skip
    except LookupError:
        return None
    return Decimal(found.total_price)


def test_every_bundled_model_sampled_costs_what_genai_prices_calculates():
    rng = random.Random(40)
    known = [(provider.id, model.id) for provider in data_snapshot.get_snapshot().providers for model in provider.models]
    tiered = 0
    for provider, model in rng.sample(known, 250):
        found = pricing._bundled_rates(model, provider, AT.replace(minute=0))
        tiered += found is not None and found[2] is not None
        for _ in range(3):
            given = rng.randint(0, 400_000)
            cached = rng.randint(0, given // 2)
            usage = Usage(input_tokens=given, output_tokens=rng.randint(0, 50_000), cache_read_tokens=cached,
                          cache_write_tokens=rng.randint(0, (given - cached) // 2), model=model, provider=provider)  # fmt: skip
            mine, theirs = pricing.bundled_cost(usage, AT), genai_cost(usage)
            assert (mine is None) == (theirs is None), (provider, model)
            assert mine is None or abs(mine - theirs) < Decimal("1e-12"), (provider, model, mine, theirs)
    assert tiered, "the sample holds tiered prices (calls above their first tier's start priced call by call)"


def test_an_unknown_model_has_no_bundled_price_and_a_known_one_its_rates_per_million():
    assert pricing.bundled_price("house-model-9", None, AT) is None
    price = pricing.bundled_price("gpt-4o", None, AT)
    assert (price.input, price.output, price.cache_read, price.valid_from) == (Decimal("2.5"), Decimal(10), Decimal("1.25"), AT.replace(minute=0))
    # A tiered price shows its first tier's rates: Sonnet 4.5 at $3 input up to 200k tokens, $6 past them.
    assert pricing.bundled_price("claude-sonnet-4-5", "anthropic", AT).input == 3
    for given in (200_000, 200_001):
        usage = Usage(input_tokens=given, output_tokens=10, model="claude-sonnet-4-5", provider="anthropic")
        assert pricing.bundled_cost(usage, AT) == genai_cost(usage)
    assert genai_cost(usage) == (200_001 * 6 + 10 * Decimal("22.5")) / 1_000_000
