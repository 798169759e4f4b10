"""The usage a transcript shows in its turn and step headers: a turn's from the sums kept at append time
(selectors.usage.turn_bills), a step's from its assistant messages' own usage, priced as the sums are; and the
model, provider and request parameters of each step, read from those messages' metadata."""

from __future__ import annotations

from sessions_app.log import pricing, request_params
from sessions_app.log import usage as log_usage
from sessions_app.selectors import usage as usage_reads


def bill_blocks(session, blocks) -> None:
    """Set `bill` on each turn block and each step container shown, and each step's `models` and `params`."""
    turns = [block for block in blocks if block.turn_start is not None]
    # A session without usage has none in any turn: nothing to read.
    used = session.tokens or session.models_used
    bills = usage_reads.turn_bills(session, [block.turn_start.seq for block in turns]) if turns and used else {}
    for block in turns:
        block.bill = bills.get(block.turn_start.seq)
    pricer = None
    for block in blocks:
        for step in steps_of(block):
            messages = [row.event for row in step.rows if row.event.type == "assistant_message"]
            pairs = [(event, u) for event in messages if (u := log_usage.of_message(event.data)) is not None]
            if pairs:
                pricer = pricer or usage_reads.pricer_for(session.project_id)
                step.bill = pricing.bill([(u, event.time) for event, u in pairs], pricer)
            step.models = list(dict.fromkeys((u.model, u.provider or model_provider(event)) for event, u in pairs if u.model))
            step.params = next((found for event in reversed(messages) if (found := request_params.of_message(event.data))), [])
            if not step.models:
                step.models = list(dict.fromkeys((m, model_provider(e)) for e in messages if (m := message_model(e))))


def steps_of(block):
    parts = [part for page in block.pages for part in page.parts] if block.pages else block.parts
    return [part for part in parts if getattr(part, "start", None) is not None and hasattr(part, "rows")]


def message_model(event) -> str | None:
    metadata = event.data.get("metadata")
    model = metadata.get("model") if isinstance(metadata, dict) else None
    return model if isinstance(model, str) and model else None


def model_provider(event) -> str | None:
    metadata = event.data.get("metadata")
    if not isinstance(metadata, dict):
        return None
    usage = metadata.get("usage")
    provider = (usage.get("provider") if isinstance(usage, dict) else None) or metadata.get("provider")
    return provider if isinstance(provider, str) and provider else None
