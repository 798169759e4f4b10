"""Hypothesis strategies for append request bodies as agents send them, odd and hostile ones included.

Drawn for tests/sessions_app/test_readback_properties.py (everything the API accepts reads back
everywhere) and reused by the log's pure tests (tests/sessions_app/log/test_ledger.py), which read
the accepted shapes as stored events. What each strategy draws is described in the readback test.
"""

import json
from datetime import UTC, datetime, timedelta, timezone

from hypothesis import strategies as st

# Team rule: a request body may nest at most 64 levels of objects and arrays,
# counted from the top-level body (depth 1). An appended event's `data` sits
# at depth 4 ({"events": [{"data": {...}}]}); deeper is 422 invalid_data.
MAX_BODY_DEPTH = 64
DATA_DEPTH = 4

SURFACE = ["system_message", "user_message", "assistant_message", "tool_result"]
BOOKKEEPING = ["tool_call", "turn_start", "turn_end", "step_start", "step_end", "request_header"]
ABSENT = object()  # a field left out of the event

# Strategies -------------------------------------------------------------
#
# Each batch is drawn either from well-formed-enough values (odd shapes the
# spec allows: the API must accept them) or from hostile ones (text it
# refuses, a level too deep, bad types, data, surface_op or time).

# Beyond 64 bits up to the parser's limit of 4,300 digits.
huge_integers = st.builds(
    lambda sign, magnitude: sign * magnitude,
    st.sampled_from([1, -1]),
    st.sampled_from([2**63 - 1, 2**63, 2**64 + 1, 10**100]) | st.integers(19, 4300).map(lambda digits: 10**digits - 1),
)
integers = st.one_of(st.integers(), huge_integers)
floats = st.floats(allow_nan=False, allow_infinity=False)
offsets = st.integers(-14 * 60, 14 * 60).map(lambda minutes: timezone(timedelta(minutes=minutes)))
valid_times = st.builds(
    lambda moment, tz: moment.replace(tzinfo=UTC).astimezone(tz).isoformat(),
    st.datetimes(min_value=datetime(1970, 1, 2), max_value=datetime(2999, 12, 30)),
    offsets,
).map(lambda text: text.removesuffix("+00:00") + "Z" if text.endswith("+00:00") else text)
positions = st.one_of(st.integers(0, 12), huge_integers.map(abs))
valid_surface_ops = st.one_of(
    st.none(), st.just("append"), st.tuples(positions, positions).map(lambda bounds: ["replace", *sorted(bounds)])
)
invalid_surface_ops = st.one_of(
    st.tuples(st.integers(), st.integers()).filter(lambda b: not 0 <= b[0] <= b[1]).map(lambda b: ["replace", *b]),
    st.sampled_from([["replace", 1], ["replace", "0", "1"], "prepend", ["replace", 1.0, 2.0], {"op": "append"}, ["replace", True, 2]]),
)
invalid_times = st.sampled_from(["yesterday", "2026-01-01", "2026-01-01T00:00:00", 12345, "", ["2026"]])


def nested(depth: int, leaf: object) -> object:
    """`depth` levels of alternating objects and arrays around `leaf` (depth 0 is the leaf)."""
    value = leaf
    for level in range(depth):
        value = [value] if level % 2 else {"n": value}
    return value


def optional_fields(**fields) -> st.SearchStrategy[dict]:
    return st.fixed_dictionaries({}, optional=fields)


def batches_of(hostile: bool) -> st.SearchStrategy[list]:
    plain_text = st.text(max_size=12)
    if hostile:  # any code point, lone surrogates and NUL included (the API refuses those two)
        any_text = st.text(st.characters(exclude_categories=()), max_size=8)
        texts = st.one_of(plain_text, any_text, st.sampled_from(["\x00", "a\ud800b", "\udfff", "é\U0001f600"]))
    else:
        texts = st.one_of(plain_text, st.sampled_from(["é\U0001f600", "\u202e\ufeff", "<script>x</script>", "{\"a\": 1}"]))
    scalars = st.one_of(st.none(), st.booleans(), integers, floats, texts)
    json_values = st.recursive(
        scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3), max_leaves=10
    )
    # `data` sits at depth 4 of the body ({"events": [{"data": {...}}]}): a value
    # in it of MAX_BODY_DEPTH - DATA_DEPTH levels makes the body exactly as deep
    # as accepted; one more level is refused.
    deep_values = st.just(nested(MAX_BODY_DEPTH - DATA_DEPTH + hostile, "bottom"))
    call_ids = st.one_of(
        st.sampled_from(["c1", "c2", "c3", 1, 2, True, False, "x" * 300, 10**300, 10**4299]),
        st.none(), texts, integers, floats, json_values,
    )
    tool_names = st.one_of(st.sampled_from(["echo", "send_email", "read_file", "n" * 300]), st.none(), texts, json_values)
    # Arguments as JSON text (OpenAI's shapes): valid or not, and valid text that holds what no
    # database stores once parsed (json.dumps writes a lone surrogate or NUL as an escape).
    json_texts = st.one_of(
        json_values.map(json.dumps), texts, st.sampled_from(['"\\ud800"', '{"a": "\\u0000"}', "[" * 70 + "]" * 70, "{not json", "NaN"])
    )
    functions = optional_fields(name=tool_names, arguments=st.one_of(json_texts, json_values))
    # This project's shape and OpenAI's chat shape ({"id", "type": "function", "function": {...}}), mixed.
    tool_call_objects = optional_fields(
        id=call_ids, tool_call_id=call_ids, name=tool_names, arguments=json_values, _invalid_arguments=texts,
        type=st.sampled_from(["function", "tool_use", None]), function=st.one_of(functions, json_values),
    )
    # Calls written as content blocks: Anthropic tool_use blocks and OpenAI Responses function_call items.
    block_calls = st.one_of(
        st.fixed_dictionaries({"type": st.just("tool_use")}, optional={"id": call_ids, "name": tool_names, "input": json_values}),
        st.fixed_dictionaries(
            {"type": st.just("function_call")}, optional={"id": call_ids, "call_id": call_ids, "name": tool_names, "arguments": json_texts}
        ),
    )
    tool_calls = st.one_of(
        st.lists(tool_call_objects, max_size=3),
        tool_call_objects,
        texts,
        st.lists(json_values, max_size=3),
        st.lists(st.one_of(tool_call_objects, scalars), max_size=3),
        st.none(),
    )
    content_parts = st.lists(
        st.one_of(st.fixed_dictionaries({"type": st.just("text"), "text": texts}), block_calls, json_values), max_size=3
    )
    contents = st.one_of(texts, content_parts, json_values)
    metadata = st.one_of(st.dictionaries(texts, json_values, max_size=3), st.none(), json_values)
    surface_ops = st.one_of(valid_surface_ops, invalid_surface_ops) if hostile else valid_surface_ops
    times = st.one_of(valid_times, st.none(), invalid_times) if hostile else st.one_of(valid_times, st.none())
    numbers = st.one_of(st.integers(1, 5), st.none(), integers, texts)
    fields = {
        "message": {"content": contents, "name": tool_names, "metadata": metadata, "surface_op": surface_ops,
                    "source": st.sampled_from(["memory", "knowledge_base", None, 3]), "deep": deep_values,
                    "extra": json_values},
        "assistant_message": {"tool_calls": tool_calls, "reasoning_content": st.one_of(st.none(), texts, json_values)},
        "tool_result": {"tool_call_id": call_ids, "id": call_ids},
        "tool_call": {"id": call_ids, "name": tool_names, "tool_call_id": call_ids, "type": st.just("function"), "function": functions,
                      "arguments": json_texts},
        "turn_start": {"turn": numbers},
        "step_start": {"turn": numbers, "step": numbers},
        "step_end": {"turn": numbers, "step": numbers, "outcome": st.sampled_from(["ok", "error", None, 1])},
        "turn_end": {"turn": numbers, "steps": numbers,
                     "reason": st.sampled_from(["complete", "rejected", "interrupted", None])},
        "request_header": {"model": texts, "deep": deep_values, "extra": json_values},
    }

    @st.composite
    def events(draw, type_: str | None = None) -> dict:
        type_ = type_ or draw(st.sampled_from(SURFACE + BOOKKEEPING))
        data_fields = (fields["message"] if type_ in SURFACE else {}) | fields.get(type_, {})
        if hostile and type_ not in SURFACE:
            data_fields = data_fields | {"surface_op": surface_ops}  # refused on bookkeeping events
        event = {"type": type_, "data": draw(optional_fields(**data_fields))}
        if hostile and draw(st.integers(0, 4)) == 0:
            event["type"] = draw(st.sampled_from(["tool_use", "", None, 7]))
        elif hostile and draw(st.integers(0, 4)) == 0:
            event["data"] = draw(st.one_of(st.none(), st.lists(json_values, max_size=2), texts, integers))
        time = draw(st.one_of(st.just(ABSENT), times))
        if time is not ABSENT:
            event["time"] = time
        return event

    @st.composite
    def crashed_turns(draw) -> list[dict]:
        """A turn cut short: calls sighted, some dispatched or answered, the turn left open."""
        turn = [draw(events("user_message")), {"type": "turn_start", "data": {"turn": 1}},
                {"type": "step_start", "data": {"turn": 1, "step": 1}}, draw(events("assistant_message"))]
        more = st.sampled_from(["tool_call", "tool_result", "step_end", "assistant_message"]).flatmap(events)
        return turn + draw(st.lists(more, max_size=3))

    return st.one_of(
        st.lists(events(), min_size=1, max_size=6),
        st.tuples(crashed_turns(), st.lists(events(), max_size=3)).map(lambda parts: parts[0] + parts[1]),
    )


# Three of four batches are ones the API must accept.
batches = st.one_of(batches_of(hostile=False), batches_of(hostile=False), batches_of(hostile=False), batches_of(hostile=True))
