"""Token usage of a model call, read from the forms it is stored in and normalised to one meaning
(api.md, "Usage and cost"): pure, no Django.

An `assistant_message` carries its model call's usage in `metadata.usage`, in its writer's form:
OpenAI's chat (`prompt_tokens`, `completion_tokens`, their `*_details`), OpenAI's Responses
(`input_tokens`, `output_tokens`, `input_tokens_details`, `output_tokens_details`), Anthropic's raw
form (`input_tokens` without the cache, `cache_read_input_tokens`, `cache_creation_input_tokens`), or
what Turnlog's own writers store (the OTLP mapping, marked by the message's `metadata.otel`; the
client's processors, marked `"source"` in the usage object), whose `input_tokens` already counts the
cache whatever the model. Normalised:

- `input_tokens`: every input token, cache reads and writes included;
- `cache_read_tokens`, `cache_write_tokens`: the parts of it read from and written to a cache;
- `output_tokens`: every output token, reasoning included; `reasoning_tokens` the part spent reasoning.

A count that is not an integer from 0 to MAX_COUNT is a count not given. A `turn_end`'s run totals are not a
model call's and are never read here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

KINDS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens")
ANTHROPIC = "anthropic"


@dataclass(frozen=True, slots=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    model: str | None = None
    provider: str | None = None

    @property
    def tokens(self) -> int:
        """What a session list sorts by: input and output (cache and reasoning are parts of them)."""
        return self.input_tokens + self.output_tokens

    def counts(self) -> dict[str, int]:
        return {kind: getattr(self, kind) for kind in KINDS}


def of_message(data: Mapping[str, Any]) -> Usage | None:
    """The usage of an assistant_message's data, normalised; None when it carries none."""
    metadata = data.get("metadata")
    if type(metadata) is not dict and not isinstance(metadata, Mapping):
        return None
    return normalised(metadata.get("usage"), metadata)


def normalised(usage: Any, metadata: Mapping[str, Any] | None = None) -> Usage | None:
    """`usage` (a message's `metadata.usage`) in the normalised meaning; `metadata` the message's, for
    the model, the provider and which writer stored it. None when `usage` holds no count at all."""
    if type(usage) is not dict and not isinstance(usage, Mapping):
        return None
    metadata = _mapping(metadata)
    prompt_details = _mapping(usage.get("prompt_tokens_details"))
    input_details = _mapping(usage.get("input_tokens_details"))
    completion_details = _mapping(usage.get("completion_tokens_details"))
    output_details = _mapping(usage.get("output_tokens_details"))
    given_input = _first(usage.get("input_tokens"), usage.get("prompt_tokens"))
    given_output = _first(usage.get("output_tokens"), usage.get("completion_tokens"))
    cache_read = _first(usage.get("cache_read_input_tokens"), usage.get("cache_read_tokens"),
                        prompt_details.get("cached_tokens"), input_details.get("cached_tokens"))
    cache_write = _first(usage.get("cache_creation_input_tokens"), usage.get("cache_write_tokens"))
    reasoning = _first(usage.get("reasoning_tokens"), completion_details.get("reasoning_tokens"),
                       output_details.get("reasoning_tokens"))
    if all(count is None for count in (given_input, given_output, cache_read, cache_write, reasoning)):
        return None
    model = _text(usage.get("model")) or _text(metadata.get("model"))
    provider = _text(usage.get("provider")) or _text(metadata.get("provider"))
    input_tokens = given_input or 0
    if _count(usage.get("input_tokens")) is not None and _anthropic_raw(usage, metadata, model, provider):
        # Anthropic's own form counts the cache beside input_tokens, not in it; only its own cache fields are
        # added (a chat form's prompt_tokens, or a library's cache_read_tokens, already hold the cache).
        input_tokens += (_count(usage.get("cache_read_input_tokens")) or 0) + (_count(usage.get("cache_creation_input_tokens")) or 0)
    return Usage(
        input_tokens=input_tokens,
        output_tokens=given_output or 0,
        cache_read_tokens=cache_read or 0,
        cache_write_tokens=cache_write or 0,
        reasoning_tokens=reasoning or 0,
        model=model,
        provider=provider,
    )


def total(usages: Iterable[Usage | None]) -> Usage:
    """The token counts of several model calls added up (model and provider left out)."""
    sums = dict.fromkeys(KINDS, 0)
    for usage in usages:
        if usage is not None:
            for kind in KINDS:
                sums[kind] += getattr(usage, kind)
    return Usage(**sums)


def _anthropic_raw(usage: Mapping, metadata: Mapping, model: str | None, provider: str | None) -> bool:
    """Whether the object is Anthropic's own form: Anthropic's model, stored by no writer of Turnlog's."""
    if "source" in usage or "otel" in metadata:
        return False
    return (provider or "").lower() == ANTHROPIC or (model or "").lower().startswith("claude")


# No model call spends a billion tokens; a larger count is a mistake, and sums of counts up to this never
# pass a 64-bit column however long a session runs.
MAX_COUNT = 1_000_000_000


def _count(value: Any) -> int | None:
    return value if type(value) is int and 0 <= value <= MAX_COUNT else None


def _first(*values: Any) -> int | None:
    for value in values:
        if type(value) is int and 0 <= value <= MAX_COUNT:
            return value
    return None


_NOTHING: Mapping = MappingProxyType({})


def _mapping(value: Any) -> Mapping:
    # A dict first: every stored message's is one, and the Mapping check is an ABC's (this runs on every append).
    return value if type(value) is dict or isinstance(value, Mapping) else _NOTHING


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None

