"""The OTLP mapping's usage (sessions_app/otel/conventions): each family's token attributes, as its
instrumentation writes them, read into the usage object the mapping stores, whose input_tokens counts the cache
once (api.md, "Usage and cost"); and that object normalised (log/usage.py) to the hand-computed counts."""

from __future__ import annotations

import json

import pytest

from sessions_app.log.usage import Usage, of_message
from sessions_app.otel.conventions import read
from sessions_app.otel.spans import Span


def span(name: str, attributes: dict, scope: str = "") -> Span:
    return Span(trace_id="0" * 31 + "1", span_id="0" * 15 + "2", parent_span_id="0" * 15 + "1", name=name,
                start_ns=1, end_ns=2, attributes=attributes, scope=scope)  # fmt: skip


GENAI_CHAT = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "claude-sonnet-4-5"}
VERCEL_DO_GENERATE = {"ai.operationId": "ai.generateText.doGenerate", "ai.model.id": "claude-sonnet-4-5"}
OPENINFERENCE_LLM = {"openinference.span.kind": "LLM", "llm.model_name": "claude-sonnet-4-5"}

# (instrumentation, span name, its attributes, the normalised usage worked out by hand)
FORMS = {
    "GenAI conventions (Pydantic AI, ADK, OpenLLMetry): input counts the cache": (
        "chat claude-sonnet-4-5",
        {**GENAI_CHAT, "gen_ai.usage.input_tokens": 5025, "gen_ai.usage.output_tokens": 200,
         "gen_ai.usage.cache_read.input_tokens": 4000, "gen_ai.usage.cache_creation.input_tokens": 1000,
         "gen_ai.usage.reasoning.output_tokens": 50},
        Usage(5025, 200, 4000, 1000, 50, "claude-sonnet-4-5"),
    ),
    "OpenLLMetry's older cache names": (
        "anthropic.chat",
        {**GENAI_CHAT, "gen_ai.system": "anthropic", "gen_ai.usage.prompt_tokens": 5025, "gen_ai.usage.completion_tokens": 200,
         "gen_ai.usage.cache_read_input_tokens": 4000, "gen_ai.usage.cache_creation_input_tokens": 1000},
        Usage(5025, 200, 4000, 1000, 0, "claude-sonnet-4-5"),
    ),
    "OpenLLMetry's reasoning count": (
        "openai.chat",
        {"gen_ai.operation.name": "chat", "gen_ai.request.model": "o4-mini", "gen_ai.system": "openai", "llm.request.type": "chat",
         "gen_ai.usage.input_tokens": 900, "gen_ai.usage.output_tokens": 120, "gen_ai.usage.cache_read_input_tokens": 512,
         "gen_ai.usage.reasoning_tokens": 96},
        Usage(900, 120, 512, 0, 96, "o4-mini"),
    ),
    "OpenLLMetry's llm.usage names": (
        "openai.chat",
        {"llm.request.type": "chat", "llm.request.model": "o4-mini", "gen_ai.request.model": "o4-mini",
         "llm.usage.prompt_tokens": 900, "llm.usage.completion_tokens": 120, "llm.usage.reasoning_tokens": 96},
        Usage(900, 120, 0, 0, 96, "o4-mini"),
    ),
    "Pydantic AI's details: cache writes and reasoning": (
        "chat gpt-5",
        {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-5", "gen_ai.system": "openai",
         "gen_ai.usage.input_tokens": 900, "gen_ai.usage.output_tokens": 120, "gen_ai.usage.cache_read.input_tokens": 512,
         "gen_ai.usage.details.reasoning_tokens": 96},
        Usage(900, 120, 512, 0, 96, "gpt-5"),
    ),
    "Vercel AI SDK 6+: totals with their details": (
        "ai.generateText.doGenerate",
        {**VERCEL_DO_GENERATE, "ai.model.provider": "anthropic.messages", "ai.usage.inputTokens": 5025, "ai.usage.outputTokens": 200,
         "ai.usage.inputTokenDetails.noCacheTokens": 25, "ai.usage.inputTokenDetails.cacheReadTokens": 4000,
         "ai.usage.inputTokenDetails.cacheWriteTokens": 1000, "ai.usage.outputTokenDetails.reasoningTokens": 50},
        Usage(5025, 200, 4000, 1000, 50, "claude-sonnet-4-5"),
    ),
    "Vercel AI SDK 5 with Anthropic: the provider's own input count, the cache beside it": (
        "ai.generateText.doGenerate",
        {**VERCEL_DO_GENERATE, "ai.model.provider": "anthropic.messages", "ai.usage.inputTokens": 25, "ai.usage.outputTokens": 200,
         "ai.usage.cachedInputTokens": 4000, "ai.usage.reasoningTokens": 50, "gen_ai.usage.input_tokens": 25,
         "ai.response.providerMetadata": json.dumps({"anthropic": {"cacheCreationInputTokens": 1000}})},
        Usage(5025, 200, 4000, 1000, 50, "claude-sonnet-4-5"),
    ),
    "Vercel AI SDK 4 with Anthropic: the cache only in the provider metadata": (
        "ai.generateText.doGenerate",
        {**VERCEL_DO_GENERATE, "ai.model.provider": "anthropic.messages", "ai.usage.promptTokens": 25, "ai.usage.completionTokens": 200,
         "ai.response.providerMetadata": json.dumps({"anthropic": {"cacheCreationInputTokens": 1000, "cacheReadInputTokens": 4000}})},
        Usage(5025, 200, 4000, 0 + 1000, 0, "claude-sonnet-4-5"),
    ),
    "Vercel AI SDK 5 with OpenAI: prompt_tokens already counts the cached ones": (
        "ai.generateText.doGenerate",
        {"ai.operationId": "ai.generateText.doGenerate", "ai.model.id": "gpt-4o", "ai.model.provider": "openai.chat",
         "ai.usage.inputTokens": 1200, "ai.usage.outputTokens": 340, "ai.usage.cachedInputTokens": 800, "ai.usage.reasoningTokens": 64},
        Usage(1200, 340, 800, 0, 64, "gpt-4o"),
    ),
    "OpenInference: the prompt count holds the cache": (
        "ChatAnthropic",
        {**OPENINFERENCE_LLM, "llm.provider": "anthropic", "llm.token_count.prompt": 5025, "llm.token_count.completion": 200,
         "llm.token_count.prompt_details.cache_read": 4000, "llm.token_count.prompt_details.cache_write": 1000,
         "llm.token_count.completion_details.reasoning": 50},
        Usage(5025, 200, 4000, 1000, 50, "claude-sonnet-4-5"),
    ),
}  # fmt: skip


@pytest.mark.parametrize(("name", "attributes", "want"), FORMS.values(), ids=FORMS.keys())
def test_each_instrumentations_usage_is_stored_counting_the_cache_once(name, attributes, want):
    # Pydantic AI's spans are known by their instrumentation scope.
    reading = read(span(name, attributes, scope="pydantic-ai" if name == "chat gpt-5" else ""))
    assert reading.family == ("pydantic_ai" if name == "chat gpt-5" else reading.family)
    assert reading.usage, reading
    # What the planner stores on the assistant_message: the reading's usage, marked by metadata.otel.
    assert of_message({"metadata": {"usage": reading.usage, "otel": {"span_id": reading.span_id}}}) == want


def test_vercel_ai_5_run_totals_on_the_call_count_anthropic_s_cache_too():
    reading = read(span("ai.generateText", {"ai.operationId": "ai.generateText", "ai.model.provider": "anthropic.messages",
                                            "ai.usage.inputTokens": 50, "ai.usage.outputTokens": 9, "ai.usage.cachedInputTokens": 8000}))  # fmt: skip
    assert reading.aggregated_usage == {"input_tokens": 8050, "output_tokens": 9, "cache_read_input_tokens": 8000}
