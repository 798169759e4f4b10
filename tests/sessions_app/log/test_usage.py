"""sessions_app/log/usage.py: every stored form of a model call's usage, normalised as api.md's "Usage
and cost" says, against hand-computed counts."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sessions_app.log.usage import KINDS, Usage, normalised, of_message, total

# (form, the message's metadata, the normalised counts worked out by hand)
FORMS = [
    (
        "OpenAI chat: prompt_tokens counts the cached ones; reasoning is part of completion_tokens",
        {"usage": {"prompt_tokens": 1200, "completion_tokens": 340, "total_tokens": 1540,
                   "prompt_tokens_details": {"cached_tokens": 800},
                   "completion_tokens_details": {"reasoning_tokens": 64}}, "model": "gpt-4o-2024-08-06"},
        Usage(1200, 340, 800, 0, 64, "gpt-4o-2024-08-06", None),
    ),
    (
        "OpenAI Responses: input_tokens counts the cached ones",
        {"usage": {"input_tokens": 900, "output_tokens": 120, "input_tokens_details": {"cached_tokens": 512},
                   "output_tokens_details": {"reasoning_tokens": 96}, "model": "o4-mini"}},
        Usage(900, 120, 512, 0, 96, "o4-mini", None),
    ),
    (
        "Anthropic's raw form: input_tokens leaves out the cache reads and writes",
        {"usage": {"input_tokens": 25, "output_tokens": 200, "cache_read_input_tokens": 4000,
                   "cache_creation_input_tokens": 1000}, "model": "claude-sonnet-4-5"},
        Usage(5025, 200, 4000, 1000, 0, "claude-sonnet-4-5", None),
    ),
    (
        "Anthropic's raw form named by its provider",
        {"usage": {"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 90, "provider": "Anthropic"},
         "model": "some-alias"},
        Usage(100, 5, 90, 0, 0, "some-alias", "Anthropic"),
    ),
    (
        "Anthropic's raw form from another host of Claude (Vertex, Bedrock's InvokeModel): the model's name says it",
        {"usage": {"input_tokens": 12, "output_tokens": 4, "cache_read_input_tokens": 300, "cache_creation_input_tokens": 40},
         "model": "claude-3-5-haiku@20241022", "provider": "gcp.vertex_ai"},
        Usage(352, 4, 300, 40, 0, "claude-3-5-haiku@20241022", "gcp.vertex_ai"),
    ),
    (
        "Claude through an OpenAI-compatible endpoint: the chat form's prompt_tokens already counts the cached ones",
        {"usage": {"prompt_tokens": 1000, "completion_tokens": 50, "prompt_tokens_details": {"cached_tokens": 800}},
         "model": "claude-sonnet-4-5"},
        Usage(1000, 50, 800, 0, 0, "claude-sonnet-4-5", None),
    ),
    (
        "Claude in a library's own inclusive form (Pydantic AI's RequestUsage: cache_read_tokens, cache_write_tokens)",
        {"usage": {"input_tokens": 1240, "output_tokens": 9, "cache_read_tokens": 1000, "cache_write_tokens": 200},
         "model": "claude-sonnet-4-5"},
        Usage(1240, 9, 1000, 200, 0, "claude-sonnet-4-5", None),
    ),
    (
        "Claude through Pydantic AI over OTLP: the mapping's input_tokens already counts the cache reads",
        {"usage": {"input_tokens": 4025, "output_tokens": 200, "cache_read_input_tokens": 4000, "model": "claude-sonnet-4-5"},
         "otel": {"span_id": "00000000000000a1"}},
        Usage(4025, 200, 4000, 0, 0, "claude-sonnet-4-5", None),
    ),
    (
        "a client processor's usage, marked with its source: already inclusive",
        {"usage": {"input_tokens": 4025, "output_tokens": 200, "cache_read_input_tokens": 4000,
                   "model": "claude-sonnet-4-5", "source": "openai-agents"}},
        Usage(4025, 200, 4000, 0, 0, "claude-sonnet-4-5", None),
    ),
    (
        "the OTLP mapping's GenAI keys with reasoning and a provider",
        {"usage": {"input_tokens": 50, "output_tokens": 30, "reasoning_tokens": 20, "model": "gemini-2.5-pro",
                   "provider": "gcp.gemini"}, "otel": {"span_id": "00000000000000a2"}},
        Usage(50, 30, 0, 0, 20, "gemini-2.5-pro", "gcp.gemini"),
    ),
]


@pytest.mark.parametrize(("metadata", "expected"), [(m, e) for _, m, e in FORMS], ids=[f for f, _, _ in FORMS])
def test_each_stored_form_normalises_to_the_hand_computed_counts(metadata, expected):
    assert of_message({"content": "…", "metadata": metadata}) == expected


@pytest.mark.parametrize("usage", [None, "12 tokens", [], {}, {"model": "gpt-4o"}, {"input_tokens": "12"}, {"input_tokens": True}])
def test_a_message_without_any_count_has_no_usage(usage):
    assert normalised(usage, {}) is None


def test_a_count_of_the_wrong_type_is_a_count_not_given():
    assert normalised({"input_tokens": -3, "output_tokens": 7.0, "prompt_tokens": 11, "completion_tokens": 2}) == Usage(11, 2)


def test_a_count_past_a_billion_is_a_count_not_given_so_no_sum_can_pass_a_64_bit_column():
    assert normalised({"input_tokens": 10**20, "output_tokens": 10**9 + 1, "cache_read_input_tokens": 5}) == Usage(
        input_tokens=0, output_tokens=0, cache_read_tokens=5
    )


def test_a_message_without_metadata_has_no_usage():
    assert of_message({"content": "hi"}) is None and of_message({"metadata": "x"}) is None


def test_totals_add_each_kind_and_leave_the_model_out():
    calls = [usage for _, metadata, usage in FORMS]
    summed = total([*calls, None])
    assert summed == Usage(**{kind: sum(getattr(u, kind) for u in calls) for kind in KINDS})
    assert summed.tokens == summed.input_tokens + summed.output_tokens


COUNT = st.one_of(st.none(), st.integers(0, 10**9), st.integers(-5, -1), st.integers(10**9 + 1, 2**70), st.text(max_size=3), st.booleans(), st.floats())
KEYS = ["input_tokens", "output_tokens", "prompt_tokens", "completion_tokens", "cache_read_input_tokens",
        "cache_creation_input_tokens", "reasoning_tokens", "cache_read_tokens", "cache_write_tokens"]


@settings(deadline=None)
@given(usage=st.dictionaries(st.sampled_from(KEYS), COUNT), model=st.sampled_from([None, "claude-3-5-haiku", "gpt-4o", ""]),
       marked=st.booleans())
def test_any_usage_object_reads_as_counts_that_never_go_negative_and_add_the_cache_once_in_anthropic_s_raw_form_only(usage, model, marked):
    metadata = {"usage": {**usage, **({"model": model} if model is not None else {})}, **({"otel": {}} if marked else {})}
    found = of_message({"metadata": metadata})
    if found is None:
        return
    assert all(getattr(found, kind) >= 0 for kind in KINDS)
    given = {key: value for key, value in usage.items() if type(value) is int and 0 <= value <= 10**9}
    if not marked and model == "claude-3-5-haiku" and "input_tokens" in given:
        # Anthropic's raw form: its own cache fields are added to its input_tokens, and nothing else is.
        assert found.input_tokens == given["input_tokens"] + given.get("cache_read_input_tokens", 0) + given.get("cache_creation_input_tokens", 0)
    elif "input_tokens" in given or "prompt_tokens" in given:  # every other form: the input as given
        assert found.input_tokens == given.get("input_tokens", given.get("prompt_tokens"))
