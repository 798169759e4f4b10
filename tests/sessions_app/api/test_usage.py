"""The Session object's `usage` over HTTP (api.md, "Usage and cost"): each stored form of a model call's usage,
appended through the API and read back from `GET /api/v1/sessions/{id}`, against counts and costs worked out by
hand from the providers' published prices (per million tokens, the bundled genai-prices data):

    gpt-4o-2024-08-06   input $2.50, cached input $1.25, output $10
    o4-mini             input $1.10, cached input $0.275, output $4.40
    claude-sonnet-4-5   input $3, cache read $0.30, cache write $3.75, output $15 (under 200k input tokens)

Reasoning tokens are part of the output and priced at the output rate."""

from __future__ import annotations

import re
from decimal import Decimal

import pytest

from tests.sessions_app import factories as f
from tests.sessions_app.api.http import append, make_session

pytestmark = pytest.mark.django_db

AT = "2026-11-02T10:15:00Z"
M = Decimal(1_000_000)

OPENAI_CHAT = {"prompt_tokens": 1200, "completion_tokens": 340, "total_tokens": 1540,
               "prompt_tokens_details": {"cached_tokens": 800}, "completion_tokens_details": {"reasoning_tokens": 64}}  # fmt: skip
# 400 uncached and 800 cached input tokens, 340 output tokens (64 of them reasoning).
OPENAI_CHAT_COST = (400 * Decimal("2.50") + 800 * Decimal("1.25") + 340 * 10) / M  # 0.0054
OPENAI_RESPONSES = {"input_tokens": 900, "output_tokens": 120, "total_tokens": 1020,
                    "input_tokens_details": {"cached_tokens": 512}, "output_tokens_details": {"reasoning_tokens": 96}}  # fmt: skip
OPENAI_RESPONSES_COST = (388 * Decimal("1.10") + 512 * Decimal("0.275") + 120 * Decimal("4.40")) / M  # 0.0010956
ANTHROPIC_RAW = {"input_tokens": 25, "output_tokens": 200, "cache_read_input_tokens": 4000, "cache_creation_input_tokens": 1000}
ANTHROPIC_RAW_COST = (25 * 3 + 4000 * Decimal("0.30") + 1000 * Decimal("3.75") + 200 * 15) / M  # 0.008025

ZERO = {"input_tokens": 0, "output_tokens": 0, "cache_read_tokens": 0, "cache_write_tokens": 0, "reasoning_tokens": 0,
        "models": [], "cost": "0", "currency": "USD", "priced": True, "unpriced": []}  # fmt: skip


def call(usage: dict | None = None, **metadata) -> dict:
    """A model call's assistant_message with its usage in `metadata.usage`."""
    event = f.assistant("answer", metadata={**({"usage": usage} if usage is not None else {}), **metadata})
    return {**event, "time": AT}


def usage_of(api, session_id: str, events: list[dict]) -> dict:
    make_session(api, session_id, agent_name="bot")
    answer = append(api, session_id, events)
    assert answer.status_code == 201, answer.content
    got = api.get(f"/api/v1/sessions/{session_id}")
    assert got.status_code == 200
    return got.json()["usage"]


def expected(input_tokens=0, output_tokens=0, cache_read_tokens=0, cache_write_tokens=0, reasoning_tokens=0, *, models=(),
             cost=Decimal(0), unpriced=()) -> dict:  # fmt: skip
    return {
        "input_tokens": input_tokens, "output_tokens": output_tokens, "cache_read_tokens": cache_read_tokens,
        "cache_write_tokens": cache_write_tokens, "reasoning_tokens": reasoning_tokens, "models": list(models),
        "cost": format(cost.quantize(Decimal("0.000001")).normalize(), "f") if cost else "0", "currency": "USD", "priced": not unpriced,
        "unpriced": list(unpriced),
    }  # fmt: skip


FORMS = {
    "openai chat, cached and reasoning tokens": (
        call(OPENAI_CHAT, model="gpt-4o-2024-08-06"),
        expected(1200, 340, 800, 0, 64, models=["gpt-4o-2024-08-06"], cost=OPENAI_CHAT_COST),
    ),
    "openai responses, cached and reasoning tokens": (
        call({**OPENAI_RESPONSES, "model": "o4-mini"}),
        expected(900, 120, 512, 0, 96, models=["o4-mini"], cost=OPENAI_RESPONSES_COST),
    ),
    "anthropic raw, cache reads and writes beside input_tokens": (
        call(ANTHROPIC_RAW, model="claude-sonnet-4-5"),
        expected(5025, 200, 4000, 1000, 0, models=["claude-sonnet-4-5"], cost=ANTHROPIC_RAW_COST),
    ),
    "claude in the otlp mapping's form: input_tokens already holds the cache": (
        call({"input_tokens": 5025, "output_tokens": 200, "cache_read_input_tokens": 4000, "cache_creation_input_tokens": 1000,
              "model": "claude-sonnet-4-5"}, otel={"span_id": "00000000000000a1"}),
        expected(5025, 200, 4000, 1000, 0, models=["claude-sonnet-4-5"], cost=ANTHROPIC_RAW_COST),
    ),
    "claude in a client processor's form, marked with its source": (
        call({"input_tokens": 5025, "output_tokens": 200, "cache_read_input_tokens": 4000, "cache_creation_input_tokens": 1000,
              "model": "claude-sonnet-4-5", "source": "openai-agents"}),
        expected(5025, 200, 4000, 1000, 0, models=["claude-sonnet-4-5"], cost=ANTHROPIC_RAW_COST),
    ),
}  # fmt: skip


@pytest.mark.parametrize(("event", "want"), FORMS.values(), ids=FORMS.keys())
def test_each_form_reads_back_as_the_hand_computed_usage_and_cost(api, event, want):
    assert usage_of(api, "s", [event]) == want


def test_a_turn_s_run_totals_on_its_turn_end_are_never_added_to_its_steps(api):
    usage = usage_of(api, "s", [
        f.user(), f.event("turn_start", turn=1),
        f.event("step_start", turn=1, step=1), call(OPENAI_CHAT, model="gpt-4o-2024-08-06"), f.event("step_end", turn=1, step=1),
        f.event("step_start", turn=1, step=2), call(ANTHROPIC_RAW, model="claude-sonnet-4-5"), f.event("step_end", turn=1, step=2),
        f.event("turn_end", turn=1, steps=2, reason="complete",
                metadata={"usage": {"input_tokens": 6225, "output_tokens": 540, "cache_read_input_tokens": 4800, "model": "gpt-4o"}}),
    ])  # fmt: skip
    assert usage == expected(1200 + 5025, 340 + 200, 800 + 4000, 1000, 64, models=["gpt-4o-2024-08-06", "claude-sonnet-4-5"],
                             cost=OPENAI_CHAT_COST + ANTHROPIC_RAW_COST)  # fmt: skip


def test_an_unknown_model_reads_partly_priced_with_the_priced_part_as_its_cost(api):
    usage = usage_of(api, "s", [
        call(OPENAI_CHAT, model="gpt-4o-2024-08-06"),
        call({"input_tokens": 70, "output_tokens": 30}, model="house-model-9"),
        call({"prompt_tokens": 5, "completion_tokens": 1}),
    ])  # fmt: skip
    assert usage == expected(1275, 371, 800, 0, 64, models=["gpt-4o-2024-08-06", "house-model-9"], cost=OPENAI_CHAT_COST,
                             unpriced=["house-model-9", "(no model)"])  # fmt: skip
    assert usage["priced"] is False


def test_a_session_without_usage_has_every_count_zero_a_cost_of_0_and_is_priced(api):
    assert usage_of(api, "s", [f.user(), call(), call(None, model="gpt-4o"), f.event("turn_start", turn=1)]) == ZERO


def test_shadowed_messages_after_a_compaction_are_still_counted(api):
    usage = usage_of(api, "s", [
        f.user(), call(OPENAI_CHAT, model="gpt-4o-2024-08-06"), f.user("more"), call(OPENAI_CHAT, model="gpt-4o-2024-08-06"),
        # The summary replaces positions 0..3 in the fold; its own model call is counted too.
        {**f.event("assistant_message", content="summary", surface_op=["replace", 0, 3],
                   metadata={"usage": {**OPENAI_RESPONSES, "model": "o4-mini"}}), "time": AT},
    ])  # fmt: skip
    events = api.get("/api/v1/sessions/s/events").json()["events"]
    assert events[-1]["data"]["surface_op"] == ["replace", 0, 3]
    assert usage == expected(2 * 1200 + 900, 2 * 340 + 120, 2 * 800 + 512, 0, 2 * 64 + 96, models=["gpt-4o-2024-08-06", "o4-mini"],
                             cost=2 * OPENAI_CHAT_COST + OPENAI_RESPONSES_COST)  # fmt: skip


def test_models_are_listed_once_in_order_of_first_use_across_appends(api):
    usage_of(api, "s", [call(ANTHROPIC_RAW, model="claude-sonnet-4-5"), call(OPENAI_CHAT, model="gpt-4o-2024-08-06")])
    append(api, "s", [call({**OPENAI_RESPONSES, "model": "o4-mini"}), call(ANTHROPIC_RAW, model="claude-sonnet-4-5"),
                      call(OPENAI_CHAT, model="gpt-4o-2024-08-06")])  # fmt: skip
    usage = api.get("/api/v1/sessions/s").json()["usage"]
    assert usage["models"] == ["claude-sonnet-4-5", "gpt-4o-2024-08-06", "o4-mini"]
    assert Decimal(usage["cost"]) == round(2 * ANTHROPIC_RAW_COST + 2 * OPENAI_CHAT_COST + OPENAI_RESPONSES_COST, 6)
    listed = api.get("/api/v1/sessions").json()["items"]
    assert [s["usage"] for s in listed if s["id"] == "s"] == [usage]


def test_a_cost_has_at_most_six_decimal_places(api):
    # 3 input and 1 output token of o4-mini: $0.0000077, shown to the millionth.
    usage = usage_of(api, "s", [call({"input_tokens": 3, "output_tokens": 1}, model="o4-mini")])
    assert re.fullmatch(r"\d+(\.\d{1,6})?", usage["cost"]) and usage["cost"] == "0.000008"
    assert usage_of(api, "t", [call(ANTHROPIC_RAW, model="claude-sonnet-4-5")])["cost"] == "0.008025"


def test_a_fork_inherits_its_parent_s_usage_before_the_boundary_with_the_models_in_the_parent_s_order(api):
    usage_of(api, "parent", [
        f.user(), f.event("turn_start", turn=1),
        call(OPENAI_CHAT, model="gpt-4o-2024-08-06"), call(ANTHROPIC_RAW, model="claude-sonnet-4-5"),
        f.event("turn_end", turn=1, steps=0, reason="complete"),
        f.user("more"), call({**OPENAI_RESPONSES, "model": "o4-mini"}),
    ])  # fmt: skip
    forked = api.post("/api/v1/sessions/parent/fork", {"boundary": 5, "id": "child"})
    assert forked.status_code == 201, forked.content
    assert forked.json()["usage"] == expected(5025 + 1200, 200 + 340, 4000 + 800, 1000, 64, models=["gpt-4o-2024-08-06", "claude-sonnet-4-5"],
                                              cost=ANTHROPIC_RAW_COST + OPENAI_CHAT_COST)  # fmt: skip
    assert api.get("/api/v1/sessions/child").json()["usage"] == forked.json()["usage"]
