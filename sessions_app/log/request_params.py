"""A model call's request parameters as an assistant message's metadata holds them, for a step's header: pure, no Django.

Writers keep them under different names: a mapping at `metadata.request`, `metadata.model_settings` (the
OpenAI Agents SDK's and Pydantic AI's name), `metadata.parameters` or `metadata.params`, or the keys
themselves beside `usage` in `metadata`. Only the parameters below are shown, in this order; values that
are not numbers, text or true/false are left out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

PARAMETERS = (
    "temperature", "top_p", "top_k", "max_tokens", "max_output_tokens", "max_completion_tokens", "frequency_penalty",
    "presence_penalty", "seed", "stop", "reasoning_effort", "tool_choice", "parallel_tool_calls",
)  # fmt: skip
PLACES = ("request", "model_settings", "parameters", "params")
# The OpenTelemetry names (gen_ai.request.temperature ...) as the OTLP mapping may keep them.
PREFIX = "gen_ai.request."


def of_message(data: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(name, value as text) of each request parameter the message's metadata holds."""
    metadata = data.get("metadata")
    if not isinstance(metadata, Mapping):
        return []
    found: dict[str, str] = {}
    for source in [metadata.get(place) for place in PLACES] + [metadata]:
        if not isinstance(source, Mapping):
            continue
        for key, value in source.items():
            name = key[len(PREFIX) :] if isinstance(key, str) and key.startswith(PREFIX) else key
            if name in PARAMETERS and name not in found and (text := _text(value)) is not None:
                found[name] = text
    return sorted(found.items(), key=lambda item: PARAMETERS.index(item[0]))


def _text(value: Any) -> str | None:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float | str) and len(str(value)) <= 60:
        return str(value)
    if isinstance(value, list) and all(isinstance(v, str) for v in value) and len(value) <= 4:
        return ", ".join(value)
    return None
