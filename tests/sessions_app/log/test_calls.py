"""sessions_app.log.calls: a call's name and arguments in the shapes runtimes send (session-log.md section 1)."""

import json
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sessions_app.log.calls import (
    call_arguments,
    call_name,
    content_calls,
    name_text,
    parsed_json_text,
    raw_arguments,
    sighting_names,
)
from sessions_app.log.events import tool_calls_of
from sessions_app.log.recovery import patch_dangling_tool_calls, plan
from sessions_app.log.strategy import MANUAL_CHECK, RESTART_TURN, strategies

from .strategies import events_of, logs, message


def openai(cid, name, arguments) -> dict:
    """A call as OpenAI's chat API sends it: arguments as JSON text inside `function`."""
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


# The name ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "call, expected",
    [
        ({"id": "c1", "name": "echo", "arguments": {}}, "echo"),
        (openai("c1", "charge_card", {"amount": 5}), "charge_card"),
        ({"name": 7}, 7),  # usable as an id is: kept as sent
        ({"name": True}, True),
        ({"name": ""}, ""),  # a string is usable, even an empty one
        ({"name": "own", "function": {"name": "other"}}, "own"),  # `name` first
        ({"name": None, "function": {"name": "inner"}}, "inner"),  # null is unusable: the function's
        ({"name": {"odd": 1}, "function": {"name": "inner"}}, "inner"),
        ({"name": 1.5, "function": {"name": 2}}, 2),
        ({"function": {"name": None}}, None),
        ({"function": {"name": ["x"]}}, None),
        ({"function": "charge_card"}, None),  # a function that is not an object names nothing
        ({"name": {"odd": 1}}, None),
        ({}, None),
        ("charge_card", None),
        (None, None),
    ],
)
def test_a_calls_name_is_its_name_when_usable_else_its_functions(call, expected):
    assert call_name(call) == expected and type(call_name(call)) is type(expected)


@pytest.mark.parametrize("name, text", [("echo", "echo"), (7, "7"), (True, "true"), (False, "false"), (0, "0"), (None, ""), ({"a": 1}, ""), (1.5, "")])
def test_a_name_reads_as_text_the_way_ids_do(name, text):
    assert name_text(name) == text


# The arguments ------------------------------------------------------------------


@pytest.mark.parametrize(
    "call, expected",
    [
        ({"arguments": {"q": 1}}, {"q": 1}),
        (openai("c1", "f", {"q": [1, "é"]}), {"q": [1, "é"]}),  # JSON text, parsed
        ({"function": {"arguments": "{not json"}}, "{not json"),  # kept as text
        ({"function": {"arguments": "{\"a\": NaN}"}}, "{\"a\": NaN}"),  # not JSON as this project reads it
        ({"function": {"arguments": "\"\\ud800\""}}, "\"\\ud800\""),  # valid JSON holding a lone surrogate: as text
        ({"function": {"arguments": "\"\\u0000\""}}, "\"\\u0000\""),  # NUL, which no database here stores: as text
        ({"function": {"arguments": "[" * 70 + "]" * 70}}, "[" * 70 + "]" * 70),  # deeper than a request may be
        ({"function": {"arguments": "[" * 5000 + "]" * 5000}}, "[" * 5000 + "]" * 5000),  # past the JSON reader
        ({"function": {"arguments": "1" * 5000}}, "1" * 5000),  # an integer past Python's limit
        ({"arguments": None, "function": {"arguments": "{}"}}, None),  # present, even null: its own
        ({"arguments": "{\"a\": 1}"}, {"a": 1}),  # a JSON text at the top is read the same way
        ({"function": {"arguments": {"already": "an object"}}}, {"already": "an object"}),
        ({"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"a": 1}}, {"a": 1}),  # Anthropic's shape
        ({"type": "function", "input": {"a": 1}}, None),  # `input` names arguments in that shape only
        ({"type": "tool_use", "arguments": {"own": 1}, "input": {"a": 1}}, {"own": 1}),
        ({"function": {}}, None),
        ({"function": "x"}, None),
        ({}, None),
        ([], None),
    ],
)
def test_a_calls_arguments_are_its_own_else_its_functions_json_text_parsed_when_valid(call, expected):
    assert call_arguments(call) == expected


def test_raw_arguments_are_the_stored_value():
    call = openai("c1", "f", {"a": 1})
    assert raw_arguments(call) == '{"a": 1}' and call_arguments(call) == {"a": 1}
    assert call == openai("c1", "f", {"a": 1})  # nothing is rewritten


storable_text = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), max_size=8)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | storable_text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(storable_text, inner, max_size=3),
    max_leaves=10,
)
names = st.one_of(storable_text, st.integers(), st.booleans())


@given(cid=st.text(max_size=5), name=names, arguments=json_values)
def test_both_shapes_of_one_call_read_the_same(cid, name, arguments):
    native = {"id": cid, "name": name, "arguments": arguments}
    chat = openai(cid, name, arguments)
    assert call_name(chat) == call_name(native) == name
    assert call_arguments(chat) == call_arguments(native) or isinstance(arguments, str)  # native text is parsed too
    assert sighting_names({"tool_calls": [chat]}) == sighting_names({"tool_calls": [native]}) == {cid: name_text(name)}


@given(text=st.text(max_size=30))
def test_any_text_parses_or_stays_itself(text):
    parsed = parsed_json_text(text)
    assert parsed == text or json.loads(text) == parsed


def test_sighting_names_give_each_id_once_the_first_call_winning():
    data = {"tool_calls": [openai("a", "first", {}), {"id": "a", "name": "second"}, {"id": 7, "name": True}, {"name": "no id"}]}
    assert sighting_names(data) == {"a": "first", "7": "true"}
    assert sighting_names({"tool_calls": {"id": "s", "type": "function", "function": {"name": "one"}}}) == {"s": "one"}
    assert sighting_names({"tool_calls": "nonsense"}) == {}


# Content blocks: read for display and policies ------------------------------------


def test_tool_use_blocks_and_function_call_items_in_content_are_read():
    data = {
        "content": [
            {"type": "text", "text": "Let me charge it."},
            {"type": "tool_use", "id": "toolu_1", "name": "charge_card", "input": {"amount": 5}},
            {"type": "function_call", "id": "fc_1", "call_id": "call_9", "name": "send_email", "arguments": "{\"to\": \"a@b\"}"},
            {"type": "function_call", "call_id": 3, "name": None, "arguments": "oops"},
            {"type": "tool_use"},
            "plain text part",
            {"type": "tool_result", "tool_use_id": "toolu_1"},
        ]
    }
    assert content_calls(data) == [
        {"kind": "tool_use", "id": "toolu_1", "name": "charge_card", "arguments": {"amount": 5}},
        {"kind": "function_call", "id": "call_9", "name": "send_email", "arguments": {"to": "a@b"}},
        {"kind": "function_call", "id": "3", "name": None, "arguments": "oops"},
        {"kind": "tool_use", "id": None, "name": None, "arguments": None},
    ]
    assert content_calls({"content": "text"}) == content_calls({}) == []


def test_recovery_neither_sights_nor_pairs_content_block_calls():
    blocks = [{"type": "tool_use", "id": "toolu_1", "name": "charge_card", "input": {}}]
    items = [("turn_start", {"turn": 1}), ("assistant_message", message(blocks))]
    result = plan(events_of(items))
    assert [r.type for r in result.repairs] == ["turn_end"]
    assert patch_dangling_tool_calls(events_of(items)) == []


# Recovery reads the chat shape ------------------------------------------------------


def test_the_plan_names_an_openai_shaped_call_and_gives_its_arguments():
    items = [
        ("turn_start", {"turn": 1}),
        ("step_start", {"turn": 1, "step": 1}),
        ("assistant_message", message("", tool_calls=[openai("c1", "charge_card", {"amount": 500})])),
        ("tool_call", {"id": "c1", "type": "function", "function": {"name": "charge_card", "arguments": "{\"amount\": 500}"}}),
    ]
    result = plan(events_of(items))
    owed = result.repairs[0]
    assert owed.data["name"] == "charge_card" and owed.call.name == "charge_card"
    assert owed.call.arguments == {"amount": 500}
    (turn,) = strategies(result, lambda name: "external_effect" if name == "charge_card" else "unknown")
    assert turn.strategy == MANUAL_CHECK and turn.as_wire()["calls"][0]["name"] == "charge_card"
    assert patch_dangling_tool_calls(events_of(items[2:3]))[0].data["name"] == "charge_card"


def test_a_tool_call_events_own_shape_names_a_call_it_alone_sighted():
    dispatch = {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}
    result = plan(events_of([("turn_start", {"turn": 1}), ("tool_call", dispatch)]))
    assert result.repairs[0].data["name"] == "read_file"
    (turn,) = strategies(result, lambda name: "read_only" if name == "read_file" else "unknown")
    assert turn.strategy == RESTART_TURN


def as_openai_shape(events):
    """The same log with every call (in tool_calls and tool_call events) in OpenAI's chat shape."""

    def convert(call):
        converted = {k: v for k, v in call.items() if k not in ("name", "arguments")}
        return {**converted, "type": "function", "function": {"name": call.get("name"), "arguments": json.dumps(call.get("arguments", {}))}}

    shaped = []
    for event in events:
        data = event.data
        if event.type == "assistant_message" and "tool_calls" in data:
            data = {**data, "tool_calls": [convert(c) for c in tool_calls_of(data)]}
        elif event.type == "tool_call":
            data = convert(data)
        shaped.append(replace(event, data=data))
    return shaped


@given(logs())
def test_the_shape_of_its_calls_never_changes_a_logs_plan(events):
    native, chat = plan(events), plan(as_openai_shape(events))
    assert [(r.type, r.data) for r in chat.repairs] == [(r.type, r.data) for r in native.repairs]
    assert [r.call for r in chat.repairs] == [r.call for r in native.repairs]
    assert chat.turn_calls == native.turn_calls
