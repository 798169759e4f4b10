"""The table: per instrumentation family, how to tell its spans, their role, and which attributes carry what.

docs/internals/otlp.md ("What maps to what") is this table in prose. A family's row lists attribute keys in
order of preference (the first usable value wins), so a newer attribute name and the older ones it
replaced sit side by side. The GenAI semantic conventions followed are v1.41.1, the last release of
`docs/gen-ai` in the semantic-conventions repository (it has since moved to semantic-conventions-genai,
unreleased), with the older forms still emitted today: per-message events (v1.28-v1.36),
`gen_ai.prompt`/`gen_ai.completion` (before v1.28), `prompt_tokens`/`completion_tokens` and the
underscore cache counts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ..readings import AGENT, MODEL, OTHER, TOOL, Message
from ..spans import Span
from . import langchain
from .messages import (
    event_messages,
    vercel_calls,
    vercel_messages,
    openai_messages,
    openinference_messages,
    semconv_messages,
    semconv_run_inputs,
    system_instructions,
)
from .values import count, first, parsed, parsed_structure, text, unflatten

# A role that depends on the span's place: a framework's root span around its agent (LangGraph's
# root CHAIN under OpenInference) is the turn; the same kind nested is plumbing.
AGENT_IF_ROOT = "agent_if_root"

Content = tuple[Any, list[Message], list[Message]]  # system instructions, input messages, output messages
ToolExtra = tuple[Any, Any, Any]  # arguments, result, call id: what a family carries beyond its keys

# The Vercel AI SDK names a run's session in its telemetry metadata (version 6 and earlier) or its
# runtime context (version 7); any of its integrations may write these.
CONVERSATION = ("gen_ai.conversation.id", "session.id", "traceloop.association.properties.session_id",
                "ai.telemetry.metadata.sessionId", "ai.telemetry.metadata.conversationId",
                "ai.settings.context.sessionId", "ai.settings.context.conversationId")

GENAI_OPERATIONS = {
    "invoke_agent": AGENT, "invoke_workflow": AGENT, "create_agent": OTHER,  # creating an agent runs nothing
    "chat": MODEL, "text_completion": MODEL, "generate_content": MODEL,
    "execute_tool": TOOL,
    "embeddings": OTHER, "retrieval": OTHER, "execute_task": OTHER,
}
# Span names per the conventions (`{operation} {target}`), Pydantic AI's instrumentation version 2
# (`agent run`, `running tool`): read when a span has no operation attribute (Logfire's pending spans of
# older releases, hand-made spans).
GENAI_NAMES = (("invoke_agent", AGENT), ("agent run", AGENT), ("invoke_workflow", AGENT), ("chat", MODEL),
               ("text_completion", MODEL), ("generate_content", MODEL), ("execute_tool", TOOL),
               ("running tool", TOOL))

GENAI_USAGE = {
    "input_tokens": ("gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens"),
    "output_tokens": ("gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens"),
    "cache_read_input_tokens": ("gen_ai.usage.cache_read.input_tokens", "gen_ai.usage.cache_read_input_tokens"),
    "cache_creation_input_tokens": ("gen_ai.usage.cache_creation.input_tokens",
                                    "gen_ai.usage.cache_creation_input_tokens"),
    # OpenLLMetry's semantic conventions name it gen_ai.usage.reasoning_tokens.
    "reasoning_tokens": ("gen_ai.usage.reasoning.output_tokens", "gen_ai.usage.reasoning_tokens"),
}


def aggregated(usage: Mapping[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
    """Run totals of an agent span: Pydantic AI's `gen_ai.aggregated_usage.*`, else usage on the agent span."""
    return {key: tuple(name.replace("gen_ai.usage.", "gen_ai.aggregated_usage.", 1) for name in names
                       if name.startswith("gen_ai.usage.")) + names
            for key, names in usage.items()}


def after_word(words: tuple[str, ...]) -> Callable[[str], str | None]:
    """What follows the operation in a span name (`invoke_agent weather` -> `weather`)."""
    def target(name: str) -> str | None:
        for word in words:
            if name.startswith(word + " ") and name[len(word) + 1:].strip():
                return name[len(word) + 1:].strip()
        return None
    return target


def whole_name(name: str) -> str | None:
    return name or None


def no_span(span: Span) -> bool:
    return False


def adk_merged_tools(span: Span) -> bool:
    """Google ADK closes a batch of parallel calls with `execute_tool (merged)` (tool `(merged tools)`, its call
    id the merged response's event id), after each call's own tool span: it runs nothing of its own."""
    return span.name == "execute_tool (merged)" or span.attributes.get("gen_ai.tool.name") == "(merged tools)"


# ---- content readers -----------------------------------------------------------------------------


def genai_content(span: Span) -> Content:
    attributes = span.attributes
    instructions = system_instructions(attributes.get("gen_ai.system_instructions"))
    if "gen_ai.input.messages" in attributes or "gen_ai.output.messages" in attributes:
        return (instructions, semconv_run_inputs(attributes.get("gen_ai.input.messages")),
                semconv_messages(attributes.get("gen_ai.output.messages"), "assistant"))
    inputs, outputs = event_messages(span)
    return instructions, inputs, outputs


def openinference_content(span: Span) -> Content:
    inputs = openinference_messages(unflatten(span.attributes, "llm.input_messages"), "user")
    outputs = openinference_messages(unflatten(span.attributes, "llm.output_messages"), "assistant")
    return (None, inputs, outputs) if inputs or outputs else genai_content(span)


def openllmetry_content(span: Span) -> Content:
    """Releases before 0.58 flatten OpenAI-style messages (`gen_ai.prompt.N.*`); later ones follow the conventions."""
    inputs = openai_messages(unflatten(span.attributes, "gen_ai.prompt"), "user")
    outputs = openai_messages(unflatten(span.attributes, "gen_ai.completion"), "assistant")
    return (None, inputs, outputs) if inputs or outputs else genai_content(span)


def vercel_content(span: Span) -> Content:
    """`ai.prompt.messages` in; the answer as `ai.response.text`, `.reasoning` and `.toolCalls`."""
    attributes = span.attributes
    inputs = vercel_messages(attributes.get("ai.prompt.messages"))
    answer = {key: attributes.get(f"ai.response.{key}") for key in ("text", "reasoning", "toolCalls")}
    if all(value is None for value in answer.values()):
        return None, inputs, []  # recordOutputs off, or a span still running
    calls = vercel_calls(answer["toolCalls"])
    output = Message("assistant", text(answer["text"]), tuple(calls), reasoning_content=text(answer["reasoning"]))
    return None, inputs, [output]


# ---- what tool spans carry beyond their keys -----------------------------------------------------


def no_extra(span: Span) -> ToolExtra:
    return None, None, None


# What OpenInference writes in place of a value its OPENINFERENCE_HIDE_* settings withhold.
REDACTED = "__REDACTED__"


def openinference_tool(span: Span) -> ToolExtra:
    """Arguments in `input.value`; the result (and LangChain's call id) in `output.value`."""
    given = {key: span.attributes.get(key) for key in ("input.value", "output.value")}
    given = {key: None if value == REDACTED else value for key, value in given.items()}
    result, call_id = langchain.result_of(given["output.value"])
    return parsed_structure(given["input.value"]), result, call_id


def openllmetry_tool(span: Span) -> ToolExtra:
    """OpenLLMetry's envelopes: `{"inputs", "kwargs": {"tool_call_id"}}` in, `{"output": ToolMessage}` out."""
    attributes = span.attributes
    entity_input = attributes.get("traceloop.entity.input", attributes.get("gen_ai.tool.call.arguments"))
    arguments, call_id = langchain.traceloop_input(entity_input)
    output = attributes.get("traceloop.entity.output", attributes.get("gen_ai.tool.call.result"))
    result, answered_id = langchain.result_of(output)
    if result is output and isinstance(envelope := parsed(output), dict) and "output" in envelope:
        result = envelope["output"]  # a tool called without a ToolCall returns its value bare
    return arguments, result, call_id or answered_id


def vercel_tool(span: Span) -> ToolExtra:
    """`ai.toolCall.result` is the result as JSON text."""
    result = span.attributes.get("ai.toolCall.result")
    return None, parsed(result) if isinstance(result, str) else result, None


# ---- recognising a family ------------------------------------------------------------------------


def has_prefix(span: Span, *prefixes: str) -> bool:
    return any(isinstance(key, str) and key.startswith(prefixes) for key in span.attributes)


def has_indexed(span: Span, *prefixes: str) -> bool:
    """A flattened indexed key (`gen_ai.prompt.0.role`), not a named one (`gen_ai.prompt.name`)."""
    return any(isinstance(key, str) and indexed(key, prefixes) for key in span.attributes)


def indexed(key: str, prefixes: tuple[str, ...]) -> bool:
    return any(key.startswith(prefix) and key[len(prefix):len(prefix) + 1].isdigit() for prefix in prefixes)


def named_like(span: Span, names: tuple[tuple[str, str], ...]) -> bool:
    return any(span.name == word or span.name.startswith(word + " ") for word, _ in names)


def is_openinference(span: Span) -> bool:
    return "openinference.span.kind" in span.attributes


OPENLLMETRY_PREFIXES = ("traceloop.", "llm.usage.")
OPENLLMETRY_INDEXED = ("gen_ai.prompt.", "gen_ai.completion.")


def is_openllmetry(span: Span) -> bool:
    if "llm.request.type" in span.attributes:
        return True
    # One startswith per key (every span of every other family comes through here), then a closer look.
    for key in span.attributes:
        if isinstance(key, str) and key.startswith(OPENLLMETRY_PREFIXES + OPENLLMETRY_INDEXED):
            if key.startswith(OPENLLMETRY_PREFIXES) or indexed(key, OPENLLMETRY_INDEXED):
                return True
    return False


def is_vercel(span: Span) -> bool:
    return "ai.operationId" in span.attributes or span.name.startswith(VERCEL_PREFIX)


def is_pydantic_ai(span: Span) -> bool:
    return (span.scope.startswith(("pydantic-ai", "pydantic_ai")) or span.name in ("agent run", "running tool")
            or has_prefix(span, "pydantic_ai.") or "tool_arguments" in span.attributes)


def is_genai(span: Span) -> bool:
    return (has_prefix(span, "gen_ai.") or any(event.name.startswith("gen_ai.") for event in span.events)
            or named_like(span, GENAI_NAMES))


# ---- the rows ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Family:
    name: str
    marks: Callable[[Span], bool]
    # (attribute, value -> role) in order; the first attribute whose value is listed decides.
    roles: tuple[tuple[str, Mapping[str, str]], ...]
    # (span-name word, role): read when no attribute decided.
    names: tuple[tuple[str, str], ...] = ()
    # Spans named like a role that are bookkeeping of the framework's (OTHER whatever their attributes say).
    bookkeeping: Callable[[Span], bool] = no_span
    agent_name: tuple[str, ...] = ("gen_ai.agent.name",)
    agent_name_from_span: Callable[[str], str | None] = after_word(("invoke_agent", "invoke_workflow"))
    model: tuple[str, ...] = ("gen_ai.response.model", "gen_ai.request.model")
    model_from_span: Callable[[str], str | None] = after_word(("chat", "text_completion", "generate_content"))
    provider: tuple[str, ...] = ("gen_ai.provider.name", "gen_ai.system")
    usage: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: GENAI_USAGE)
    aggregated_usage: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: aggregated(GENAI_USAGE))
    # The counts read under `usage` made to count the cache in input_tokens, where a family's form does not.
    usage_inclusive: Callable[[Mapping[str, Any], dict[str, Any]], dict[str, Any]] = lambda attributes, usage: usage
    tool_name: tuple[str, ...] = ("gen_ai.tool.name",)
    tool_name_from_span: Callable[[str], str | None] = after_word(("execute_tool",))
    tool_call_id: tuple[str, ...] = ("gen_ai.tool.call.id",)
    tool_arguments: tuple[str, ...] = ("gen_ai.tool.call.arguments",)
    tool_result: tuple[str, ...] = ("gen_ai.tool.call.result",)
    tool_extra: Callable[[Span], ToolExtra] = no_extra
    content: Callable[[Span], Content] = genai_content
    conversation: tuple[str, ...] = CONVERSATION


GENAI = Family(
    name="genai",
    marks=is_genai,
    roles=(("gen_ai.operation.name", GENAI_OPERATIONS),),
    names=GENAI_NAMES,
    bookkeeping=adk_merged_tools,
)

PYDANTIC_AI_USAGE = {**GENAI_USAGE,
                     "cache_creation_input_tokens": (*GENAI_USAGE["cache_creation_input_tokens"],
                                                     "gen_ai.usage.details.cache_write_tokens"),
                     "reasoning_tokens": (*GENAI_USAGE["reasoning_tokens"], "gen_ai.usage.details.reasoning_tokens")}

PYDANTIC_AI = replace(
    GENAI,
    name="pydantic_ai",
    marks=is_pydantic_ai,
    # Instrumentation version 2 names the agent `agent_name` and the tool's content `tool_arguments` /
    # `tool_response`; versions 3+ use the conventions' names. `pydantic_ai.all_messages` and
    # `final_result` on the agent span repeat what the model spans carry and are not read.
    agent_name=("gen_ai.agent.name", "agent_name"),
    usage=PYDANTIC_AI_USAGE,
    aggregated_usage=aggregated(PYDANTIC_AI_USAGE),
    tool_arguments=("gen_ai.tool.call.arguments", "tool_arguments"),
    tool_result=("gen_ai.tool.call.result", "tool_response"),
)

# The Vercel AI SDK's ai.* spans (version 6 and earlier; version 7's LegacyOpenTelemetry): the call
# (`ai.generateText`) is the turn, each provider request (`.doGenerate`) a step, `ai.toolCall` a tool.
VERCEL_PREFIX = "ai."
VERCEL_OPERATIONS = {
    **dict.fromkeys(("ai.generatetext", "ai.streamtext", "ai.generateobject", "ai.streamobject"), AGENT),
    **dict.fromkeys(("ai.generatetext.dogenerate", "ai.streamtext.dostream", "ai.generateobject.dogenerate",
                     "ai.streamobject.dostream"), MODEL),
    "ai.toolcall": TOOL,
}
# Names for spans without `ai.operationId` (hand-made ones): the same, spelt as the SDK spells them.
VERCEL_NAMES = (("ai.generateText.doGenerate", MODEL), ("ai.streamText.doStream", MODEL),
                ("ai.generateObject.doGenerate", MODEL), ("ai.streamObject.doStream", MODEL),
                ("ai.generateText", AGENT), ("ai.streamText", AGENT), ("ai.generateObject", AGENT),
                ("ai.streamObject", AGENT), ("ai.toolCall", TOOL))
# Version 5+ names first; `promptTokens`/`completionTokens` are version 4's. From version 6 (which sends
# `ai.usage.inputTokenDetails.*`) `ai.usage.inputTokens` counts cached input too, as the conventions'
# input_tokens does; before, it was the provider's own count (vercel_usage_inclusive).
VERCEL_USAGE = {
    "input_tokens": ("ai.usage.inputTokens", "ai.usage.promptTokens", *GENAI_USAGE["input_tokens"]),
    "output_tokens": ("ai.usage.outputTokens", "ai.usage.completionTokens", *GENAI_USAGE["output_tokens"]),
    "cache_read_input_tokens": ("ai.usage.inputTokenDetails.cacheReadTokens", "ai.usage.cachedInputTokens"),
    "cache_creation_input_tokens": ("ai.usage.inputTokenDetails.cacheWriteTokens",),
    "reasoning_tokens": ("ai.usage.outputTokenDetails.reasoningTokens", "ai.usage.reasoningTokens"),
}

def vercel_usage_inclusive(attributes: Mapping[str, Any], usage: dict[str, Any]) -> dict[str, Any]:
    """Versions 4 and 5 pass Anthropic's own input count through, which leaves the cache out: its reads are in
    `ai.usage.cachedInputTokens` (or the provider metadata), its writes only in the provider metadata."""
    if any(key.startswith("ai.usage.inputTokenDetails.") for key in attributes):
        return usage  # version 6+: a total
    if "anthropic" not in (text(attributes.get("ai.model.provider")) or "").lower():
        return usage
    given = first(attributes, ("ai.usage.inputTokens", "ai.usage.promptTokens"), count)
    if given is None:
        return usage
    metadata = parsed(attributes.get("ai.response.providerMetadata"))
    anthropic = metadata.get("anthropic") if isinstance(metadata, dict) else None
    anthropic = anthropic if isinstance(anthropic, dict) else {}
    read = usage.get("cache_read_input_tokens", count(anthropic.get("cacheReadInputTokens")))
    written = count(anthropic.get("cacheCreationInputTokens"))
    fixed = {**usage, "input_tokens": given + (read or 0) + (written or 0)}
    fixed |= {key: value for key, value in (("cache_read_input_tokens", read), ("cache_creation_input_tokens", written)) if value}
    return fixed


VERCEL = Family(
    name="vercel",
    marks=is_vercel,
    roles=(("ai.operationId", VERCEL_OPERATIONS),),
    names=VERCEL_NAMES,
    agent_name=("ai.telemetry.functionId", "gen_ai.agent.name"),
    agent_name_from_span=lambda name: None,
    model=("ai.response.model", "ai.model.id", "gen_ai.response.model", "gen_ai.request.model"),
    model_from_span=lambda name: None,
    provider=("ai.model.provider", "gen_ai.system"),
    usage=VERCEL_USAGE,
    aggregated_usage=VERCEL_USAGE,  # the call's span holds the totals of its steps
    usage_inclusive=vercel_usage_inclusive,
    tool_name=("ai.toolCall.name",),
    tool_name_from_span=lambda name: None,
    tool_call_id=("ai.toolCall.id",),
    tool_arguments=("ai.toolCall.args",),
    tool_result=(),
    tool_extra=vercel_tool,
    content=vercel_content,
)

OPENINFERENCE_USAGE = {
    "input_tokens": ("llm.token_count.prompt", *GENAI_USAGE["input_tokens"]),
    "output_tokens": ("llm.token_count.completion", *GENAI_USAGE["output_tokens"]),
    "cache_read_input_tokens": ("llm.token_count.prompt_details.cache_read",),
    "cache_creation_input_tokens": ("llm.token_count.prompt_details.cache_write",),
    "reasoning_tokens": ("llm.token_count.completion_details.reasoning",),
}

OPENINFERENCE = Family(
    name="openinference",
    marks=is_openinference,
    roles=(("openinference.span.kind", {"agent": AGENT, "llm": MODEL, "tool": TOOL, "chain": AGENT_IF_ROOT,
                                        "retriever": OTHER, "embedding": OTHER, "reranker": OTHER,
                                        "guardrail": OTHER, "evaluator": OTHER, "prompt": OTHER,
                                        "decision": OTHER, "unknown": OTHER}),),
    agent_name=("agent.name", "gen_ai.agent.name", "graph.node.name"),
    agent_name_from_span=whole_name,
    model=("llm.response.model_name", "llm.model_name", "llm.request.model_name"),
    model_from_span=lambda name: None,
    provider=("llm.provider", "llm.system"),
    usage=OPENINFERENCE_USAGE,
    aggregated_usage=OPENINFERENCE_USAGE,
    tool_name=("tool.name", "tool_call.function.name"),
    tool_name_from_span=whole_name,
    tool_call_id=("tool_call.id", "tool.id"),
    tool_arguments=("tool_call.function.arguments",),
    tool_result=(),
    tool_extra=openinference_tool,
    content=openinference_content,
)

OPENLLMETRY_USAGE = {**GENAI_USAGE,
                     "input_tokens": (*GENAI_USAGE["input_tokens"], "llm.usage.prompt_tokens"),
                     "output_tokens": (*GENAI_USAGE["output_tokens"], "llm.usage.completion_tokens"),
                     "reasoning_tokens": (*GENAI_USAGE["reasoning_tokens"], "llm.usage.reasoning_tokens")}

OPENLLMETRY = replace(
    GENAI,
    name="openllmetry",
    marks=is_openllmetry,
    roles=(("traceloop.span.kind", {"workflow": AGENT, "agent": AGENT, "tool": TOOL, "task": OTHER}),
           ("llm.request.type", {"chat": MODEL, "completion": MODEL, "embedding": OTHER, "rerank": OTHER}),
           ("gen_ai.operation.name", GENAI_OPERATIONS)),
    agent_name=("gen_ai.agent.name", "traceloop.entity.name", "traceloop.workflow.name"),
    agent_name_from_span=whole_name,
    usage=OPENLLMETRY_USAGE,
    aggregated_usage=aggregated(OPENLLMETRY_USAGE),
    tool_name=("gen_ai.tool.name", "traceloop.entity.name"),
    tool_name_from_span=lambda name: after_word(("execute_tool",))(name) or name.removesuffix(".tool") or None,
    tool_arguments=(),  # its gen_ai.tool.call.arguments is the whole envelope: tool_extra unwraps it
    tool_result=(),
    tool_extra=openllmetry_tool,
    content=openllmetry_content,
)

# In order: the first family whose mark a span bears reads it. OpenInference, OpenLLMetry and the
# Vercel AI SDK come first because their spans may carry gen_ai.* keys too, with meanings of their own
# (OpenInference's span processor for the Vercel AI SDK adds its own keys to ai.* spans: it reads them).
FAMILIES = (OPENINFERENCE, OPENLLMETRY, VERCEL, PYDANTIC_AI, GENAI)
# A span no family claims is read with the conventions' keys, as OTHER unless its keys say more.
FALLBACK = replace(GENAI, name="")


def family_of(span: Span) -> Family:
    return next((family for family in FAMILIES if family.marks(span)), FALLBACK)


def role_of(family: Family, span: Span) -> str:
    if family.bookkeeping(span):
        return OTHER
    for key, roles in family.roles:
        value = span.attributes.get(key)
        if isinstance(value, str) and (role := roles.get(value.lower())) is not None:
            return role
    for word, role in family.names:
        if span.name == word or span.name.startswith(word + " "):
            return role
    return OTHER

