"""A scripted `Model` for the OpenAI Agents SDK: canned answers, no network, traced as the SDK's own models trace.

`ScriptedModel(answers)` answers each request with the next list of output
items. `style="responses"` traces like OpenAIResponsesModel (a response span
holding the Response, its input and usage); `style="chat"` like
OpenAIChatCompletionsModel (a generation span holding the chat message, the
model name and usage). No Django here: a test's subprocess imports it too.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from agents.items import ModelResponse
from agents.models.interface import Model, ModelTracing
from agents.tracing import generation_span, response_span
from agents.usage import Usage, model_usage_to_span_usage
from openai.types.responses import Response, ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText
from openai.types.responses.response_usage import InputTokensDetails, OutputTokensDetails

MODEL = "scripted-1"


def call(call_id: str, name: str, **arguments: Any) -> ResponseFunctionToolCall:
    return ResponseFunctionToolCall(type="function_call", call_id=call_id, name=name, arguments=json.dumps(arguments))


def say(text: str) -> ResponseOutputMessage:
    content = [ResponseOutputText(type="output_text", text=text, annotations=[])]
    return ResponseOutputMessage(type="message", id=f"msg_{abs(hash(text))}", role="assistant", status="completed", content=content)


def usage_for(request: int) -> Usage:
    """Distinct counts per request, so a test can tell which step's usage it reads."""
    return Usage(
        requests=1, input_tokens=100 * request, output_tokens=10 * request, total_tokens=110 * request,
        input_tokens_details=InputTokensDetails(cached_tokens=30 * request, cache_write_tokens=request),
        output_tokens_details=OutputTokensDetails(reasoning_tokens=4 * request),
    )  # fmt: skip


class ScriptedModel(Model):
    def __init__(self, answers: list[list[Any]], *, style: Literal["responses", "chat"] = "responses"):
        self.answers = list(answers)
        self.style = style
        self.requests = 0

    async def get_response(
        self, system_instructions, input, model_settings, tools, output_schema, handoffs, tracing: ModelTracing, *,
        previous_response_id=None, conversation_id=None, prompt=None,
    ) -> ModelResponse:  # fmt: skip
        self.requests += 1
        usage = usage_for(self.requests)
        output = self.answers.pop(0)
        response = Response(
            id=f"resp_{self.requests}", created_at=0, model=MODEL, object="response", output=output, parallel_tool_calls=True,
            tool_choice="auto", tools=[],
        )  # fmt: skip
        if self.style == "chat":
            with generation_span(model=MODEL, disabled=tracing.is_disabled()) as span:
                span.span_data.usage = model_usage_to_span_usage(usage)
                if tracing.include_data():
                    messages = [{"role": "system", "content": system_instructions}] if system_instructions else []
                    span.span_data.input = messages + ([{"role": "user", "content": input}] if isinstance(input, str) else list(input))
                    span.span_data.output = [chat_message(output)]
        else:
            with response_span(disabled=tracing.is_disabled()) as span:
                span.span_data.usage = model_usage_to_span_usage(usage)
                if tracing.include_data():
                    span.span_data.response = response
                    span.span_data.input = input
        return ModelResponse(output=output, usage=usage, response_id=response.id)

    async def stream_response(self, *args: Any, **kwargs: Any):
        raise NotImplementedError("scripted runs are not streamed")
        yield  # an async generator, as the interface expects


def chat_message(output: list[Any]) -> dict[str, Any]:
    """The chat completion message a provider would have sent for these output items."""
    text = "".join(part.text for item in output if item.type == "message" for part in item.content)
    calls = [
        {"id": item.call_id, "type": "function", "function": {"name": item.name, "arguments": item.arguments}}
        for item in output if item.type == "function_call"
    ]  # fmt: skip
    return {"role": "assistant", "content": text or None, "tool_calls": calls or None}
