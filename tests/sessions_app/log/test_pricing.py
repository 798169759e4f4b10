"""sessions_app/log/pricing.py: a project's own prices first, then the bundled genai-prices data; every token kind
at its own rate; partly priced when a model has no price; the bundled rates, read once per model, provider and hour,
price every call as genai-prices' own calculation does (tiered prices call by call)."""

from __future__ import annotations

import random
from datetime import UTC, datetime
from decimal import Decimal

import genai_prices
from genai_prices import data_snapshot
from hypothesis import given
from hypothesis import strategies as st

from sessions_app.log import pricing
from sessions_app.log.pricing import NO_MODEL, Price, Pricer, bill, text
from sessions_app.log.usage import Usage

HOUR = datetime(2026, 11, 2, 10, tzinfo=UTC)
HOUSE = Price(model="house-9", valid_from=HOUR, input=Decimal(2), output=Decimal(8), cache_read=Decimal("0.5"),
              cache_write=Decimal(3), reasoning=Decimal(10))  # fmt: skip


def test_each_token_kind_is_priced_at_its_own_rate():
    usage = Usage(input_tokens=1_000, output_tokens=500, cache_read_tokens=600, cache_write_tokens=100, reasoning_tokens=200, model="house-9")
    # 300 uncached at 2, 600 read at 0.5, 100 written at 3, 300 answered at 8, 200 reasoning at 10, per million.
    assert HOUSE.cost(usage) == Decimal(300 * 2 + 600 * Decimal("0.5") + 100 * 3 + 300 * 8 + 200 * 10) / 1_000_000


def test_without_cache_or_reasoning_prices_they_cost_the_input_and_output_rates():
    plain = Price(model="house-9", valid_from=HOUR, input=Decimal(2), output=Decimal(8))
    usage = Usage(input_tokens=1_000, output_tokens=500, cache_read_tokens=600, reasoning_tokens=200, model="house-9")
    assert plain.cost(usage) == Decimal(1_000 * 2 + 500 * 8) / 1_000_000


def test_a_project_price_wins_from_its_hour_on_and_the_bundled_data_prices_the_rest():
    pricer = Pricer([HOUSE])
    usage = Usage(input_tokens=1_000_000, output_tokens=0, model="house-9")
    assert pricer.cost(usage, HOUR.replace(minute=59)) == 2
    assert pricer.cost(usage, HOUR.replace(hour=9, minute=59)) is None  # before its hour: unknown to the bundled data
    assert pricer.cost(Usage(input_tokens=1_000_000, model="gpt-4o"), HOUR) == Decimal("2.5")


def test_a_price_naming_the_provider_wins_over_one_for_any_provider():
    for_any = Price(model="m", valid_from=HOUR, input=Decimal(1), output=Decimal(1))
    for_azure = Price(model="m", valid_from=HOUR, input=Decimal(5), output=Decimal(5), provider="azure")
    pricer = Pricer([for_any, for_azure])
    usage = Usage(input_tokens=1_000_000, model="m", provider="azure")
    assert pricer.cost(usage, HOUR) == 5 and pricer.cost(Usage(input_tokens=1_000_000, model="m"), HOUR) == 1


def test_a_bill_is_partly_priced_with_the_models_it_could_not_price_once_each_in_order():
    calls = [
        (Usage(input_tokens=10, output_tokens=1, model="mystery"), HOUR),
        (Usage(input_tokens=10, output_tokens=1), HOUR),
        (Usage(input_tokens=1_000_000, output_tokens=0, model="house-9"), HOUR),
        (Usage(input_tokens=10, output_tokens=1, model="mystery"), HOUR),
        (Usage(model="tokenless"), HOUR),
    ]
    found = bill(calls, Pricer([HOUSE]))
    assert found.unpriced == ("mystery", NO_MODEL) and not found.priced
    assert found.models == ("mystery", "house-9", "tokenless") and found.cost == 2
    assert found.as_api()["cost"] == "2" and found.as_api()["input_tokens"] == 1_000_030


@given(st.decimals(min_value=0, max_value=10**9, places=9, allow_nan=False, allow_infinity=False))
def test_a_cost_is_written_with_at_most_six_places_and_no_exponent(cost):
    written = text(cost)
    assert "E" not in written and "e" not in written
    assert len(written.partition(".")[2]) <= 6
    assert abs(Decimal(written) - cost) <= Decimal("0.0000005")


@given(st.lists(st.tuples(st.integers(0, 10**7), st.integers(0, 10**7)), max_size=20))
def test_a_bill_is_the_sum_of_its_calls_costs(counts):
    pricer = Pricer([HOUSE])
    calls = [(Usage(input_tokens=i, output_tokens=o, model="house-9"), HOUR) for i, o in counts]
    found = bill(calls, pricer)
    assert found.input_tokens == sum(i for i, _ in counts) and found.output_tokens == sum(o for _, o in counts)
    assert abs(found.cost - sum(pricer.cost(u, at) for u, at in calls)) <= Decimal("0.0000005")


def test_a_provider_the_price_data_does_not_know_still_leaves_the_model_s_own_price():
    pricer = Pricer()
    through_gateway = Usage(input_tokens=1_000_000, model="gpt-4o", provider="some-gateway")
    assert pricer.cost(through_gateway, HOUR) == pricer.cost(Usage(input_tokens=1_000_000, model="gpt-4o"), HOUR) == Decimal("2.5")


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
