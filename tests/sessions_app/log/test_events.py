import json
from datetime import UTC, datetime, timedelta, timezone

import pytest

from sessions_app.log import values
from sessions_app.log.events import (
    BOOKKEEPING_TYPES,
    DATA_LEVEL,
    EVENT_TYPES,
    SURFACE_TYPES,
    Event,
    InvalidEvent,
    NewEvent,
    call_id,
    event_from_wire,
    event_to_wire,
    format_time,
    json_integer,
    parse_time,
    replace_range,
    tool_calls_of,
    tool_name,
    validate_batch,
    validate_event,
)


def reason_of(type, data, time=None) -> str:
    with pytest.raises(InvalidEvent) as caught:
        validate_event(type, data, time)
    return caught.value.reason


def test_whitelist_is_the_two_kinds_of_section_1():
    assert SURFACE_TYPES.isdisjoint(BOOKKEEPING_TYPES)
    assert EVENT_TYPES == {
        "system_message", "user_message", "assistant_message", "tool_result",
        "tool_call", "turn_start", "turn_end", "step_start", "step_end", "request_header",
    }  # fmt: skip


@pytest.mark.parametrize("type", ["message", "Turn_Start", "", None, 3, ["user_message"]])
def test_unknown_event_type(type):
    assert reason_of(type, {}) == "unknown_event_type"


@pytest.mark.parametrize("data", [None, [], "text", 1, True])
def test_invalid_data(data):
    assert reason_of("user_message", data) == "invalid_data"


def test_surface_op_on_a_bookkeeping_event_is_refused_but_a_null_one_is_absent():
    assert reason_of("turn_start", {"surface_op": "append"}) == "surface_op_on_non_surface_event"
    assert validate_event("turn_start", {"turn": 1, "surface_op": None}).type == "turn_start"


@pytest.mark.parametrize(
    "op",
    [
        "prepend",
        ["replace", 3, 2],  # start > stop
        ["replace", -1, 2],
        ["replace", True, 2],  # a bool is not an integer
        ["replace", 0, False],
        ["replace", 1.0, 2],
        ["replace", "1", 2],
        ["replace", 1],
        ["replace", 1, 2, 3],
        ["swap", 1, 2],
        {"replace": [1, 2]},
    ],
)
def test_invalid_surface_op(op):
    assert reason_of("assistant_message", {"surface_op": op}) == "invalid_surface_op"


@pytest.mark.parametrize("op", ["append", ["replace", 0, 0], ["replace", 2, 5], None])
def test_valid_surface_ops_are_kept_as_given(op):
    event = validate_event("user_message", {"content": "x", "surface_op": op})
    assert event == NewEvent("user_message", {"content": "x", "surface_op": op}, None)


@pytest.mark.parametrize(
    "time", ["2026-01-01T00:00:00", "2026-01-01", "yesterday", "", 1767225600, datetime(2026, 1, 1)]
)
def test_invalid_time(time):
    assert reason_of("user_message", {}, time) == "invalid_time"


@pytest.mark.parametrize(
    "given, utc",
    [
        ("2026-01-01T10:00:00Z", datetime(2026, 1, 1, 10, tzinfo=UTC)),
        ("2026-01-01T12:30:00+02:30", datetime(2026, 1, 1, 10, tzinfo=UTC)),
        ("2025-12-31T23:00:00-11:00", datetime(2026, 1, 1, 10, tzinfo=UTC)),
        (datetime(2026, 1, 1, 11, tzinfo=timezone(timedelta(hours=1))), datetime(2026, 1, 1, 10, tzinfo=UTC)),
    ],
)
def test_times_with_an_offset_are_converted_to_utc(given, utc):
    time = validate_event("user_message", {}, given).time
    assert time == utc and time.utcoffset() == timedelta(0)


def test_checks_run_in_the_order_of_the_table():
    assert reason_of("bogus", None, "naive") == "unknown_event_type"
    assert reason_of("user_message", None, "naive") == "invalid_data"
    assert reason_of("tool_call", {"surface_op": "bad"}, "naive") == "surface_op_on_non_surface_event"
    assert reason_of("user_message", {"surface_op": "bad"}, "naive") == "invalid_surface_op"


def test_the_detail_says_where_and_is_the_message():
    with pytest.raises(InvalidEvent) as caught:
        validate_event("tool_result", {"surface_op": ["replace", 5, 1]}, index=3)
    error = caught.value
    assert (error.index, error.reason) == (3, "invalid_surface_op")
    assert error.detail.startswith("events[3].data.surface_op: ")
    assert '["replace", 5, 1]' in error.detail
    assert str(error) == error.detail


@pytest.mark.parametrize("time", ["0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00"])
def test_a_time_outside_utc_years_says_so_rather_than_calling_it_no_date_time(time):
    """It is an ISO 8601 date-time with an offset: what is wrong is its year once in UTC."""
    with pytest.raises(InvalidEvent) as caught:
        validate_event("user_message", {}, time, index=1)
    assert caught.value.reason == "invalid_time"
    assert caught.value.detail == f'events[1].time: "{time}" falls outside years 1 to 9999 once converted to UTC'


def test_a_batch_is_refused_at_its_first_invalid_item():
    good = {"type": "user_message", "data": {"content": "hi"}}
    with pytest.raises(InvalidEvent) as caught:
        validate_batch([good, good, {"type": "user_message", "data": {}, "time": "nope"}, {"type": "x"}])
    assert (caught.value.index, caught.value.reason) == (2, "invalid_time")
    assert caught.value.detail.startswith("events[2].time: ")


@pytest.mark.parametrize(
    "item, reason",
    [
        ({"data": {}}, "unknown_event_type"),
        ({"type": "user_message"}, "invalid_data"),
        ("x", "unknown_event_type"),
    ],
)
def test_a_batch_item_missing_a_key(item, reason):
    with pytest.raises(InvalidEvent) as caught:
        validate_batch([item])
    assert (caught.value.index, caught.value.reason) == (0, reason)


def test_a_valid_batch_keeps_order_and_times():
    batch = validate_batch(
        [
            {"type": "user_message", "data": {"content": "hi"}, "time": "2026-01-01T00:00:00Z"},
            {"type": "turn_start", "data": {"turn": 1}, "time": None},
        ]
    )
    assert batch == [
        NewEvent("user_message", {"content": "hi"}, datetime(2026, 1, 1, tzinfo=UTC)),
        NewEvent("turn_start", {"turn": 1}, None),
    ]


def test_format_time_ends_in_z_and_keeps_only_nonzero_microseconds():
    assert format_time(datetime(2026, 1, 1, tzinfo=UTC)) == "2026-01-01T00:00:00Z"
    assert format_time(datetime(2026, 1, 1, 0, 0, 0, 120, tzinfo=UTC)) == "2026-01-01T00:00:00.000120Z"
    assert format_time(datetime(2026, 1, 1, 1, tzinfo=timezone(timedelta(hours=1)))) == "2026-01-01T00:00:00Z"


def test_parse_time_round_trips_format_time_and_refuses_naive():
    moment = datetime(2026, 3, 4, 5, 6, 7, 890, tzinfo=UTC)
    assert parse_time(format_time(moment)) == moment
    with pytest.raises(ValueError):
        parse_time("2026-03-04T05:06:07")
    with pytest.raises(ValueError):
        parse_time("0001-01-01T00:00:00+01:00")  # before year 1 in UTC


@pytest.mark.parametrize(
    "mapping, expected",
    [
        ({"tool_call_id": "a", "id": "b"}, "a"),
        ({"id": "b"}, "b"),
        ({"tool_call_id": None, "id": "b"}, "b"),
        ({"tool_call_id": 1.5, "id": 7}, "7"),
        ({"tool_call_id": {"x": 1}, "id": ["y"]}, None),
        ({"tool_call_id": 42}, "42"),
        # PostgreSQL's jsonb reads 1.0000000748488348e+16 back as the integer 10000000748488348 (but
        # keeps 7.0 a float): the append and SQLite read it so too.
        ({"id": 1.0000000748488348e16}, "10000000748488348"),
        ({"id": 10000000748488348}, "10000000748488348"),
        ({"tool_call_id": 7.0, "id": "b"}, "b"),
        ({"id": 1e300}, "1" + "0" * 300),  # the digits of its JSON text, as jsonb keeps them
        ({"tool_call_id": float("inf"), "id": float("nan")}, None),
        ({"id": True}, "true"),
        ({"tool_call_id": False, "id": "b"}, "false"),
        ({"id": ""}, ""),
        ({}, None),
        ("call_1", None),
        (None, None),
    ],
)
def test_call_id(mapping, expected):
    assert call_id(mapping) == expected


@pytest.mark.parametrize(
    "data, expected",
    [
        ({"tool_calls": [{"id": "a"}, {"id": "b"}]}, [{"id": "a"}, {"id": "b"}]),
        ({"tool_calls": {"id": "a"}}, [{"id": "a"}]),
        ({"tool_calls": None}, []),
        ({"tool_calls": "call_1"}, []),
        ({}, []),
    ],
)
def test_tool_calls_of(data, expected):
    assert tool_calls_of(data) == expected


@pytest.mark.parametrize(
    "data, expected",
    [
        ({"surface_op": ["replace", 1, 4]}, (1, 4)),
        ({"surface_op": "append"}, None),
        ({"surface_op": ["replace", 4, 1]}, None),
        ({}, None),
    ],
)
def test_replace_range(data, expected):
    assert replace_range(data) == expected


def test_wire_form_round_trips():
    event = Event(4, "user_message", datetime(2026, 1, 1, 0, 0, 1, 5, tzinfo=UTC), {"content": "hi"})
    wire = event_to_wire(event)
    assert wire == {
        "seq": 4, "type": "user_message", "time": "2026-01-01T00:00:01.000005Z", "data": {"content": "hi"}
    }  # fmt: skip
    assert event_from_wire(wire) == event


@pytest.mark.parametrize(
    "data, where",
    [
        ({"content": "a\ud800"}, "events[0].data.content: contains a lone surrogate \\ud800"),
        ({"content": [{"text": "\x00"}]}, "events[0].data.content[0].text: contains U+0000"),
        ({"metadata": {"k\udc00": 1}}, 'events[0].data.metadata["k\\udc00"]: the key contains a lone surrogate'),
        ({"n": float("nan")}, "events[0].data.n: nan is not a JSON number"),
        ({"x": json.loads("[" * 61 + "]" * 61)}, "events[0].data.x[0][0][0]"),
    ],
)
def test_data_no_database_stores_alike_is_invalid_data_naming_the_path(data, where):
    with pytest.raises(InvalidEvent) as refused:
        validate_event("user_message", data)
    assert refused.value.reason == "invalid_data"
    assert refused.value.detail.startswith(where)


def test_data_nests_at_most_to_the_request_depth_limit():
    def nested(levels):  # data itself is the first level
        return {} if levels == 1 else {"x": nested(levels - 1)}

    levels_allowed = values.MAX_DEPTH - DATA_LEVEL + 1  # the body, its events list and the event hold data
    assert validate_event("user_message", nested(levels_allowed)).data
    with pytest.raises(InvalidEvent, match="deeper than 64 levels"):
        validate_event("user_message", nested(levels_allowed + 1))


@pytest.mark.parametrize("name, expected", [("echo", "echo"), (None, None), (7, None), ({"a": 1}, None), (["x"], None)])
def test_tool_name_is_text_or_none(name, expected):
    assert tool_name(name) == expected


@pytest.mark.parametrize(
    "value, expected",
    [(7, 7), (7.0, None), (1e15, None), (1e16, 10**16), (1.0000000748488348e16, 10000000748488348), (-3.9e16, -39000000000000000), (True, None), (1.5, None), ("7", None), (None, None)],
)
def test_json_integer_reads_integers_as_postgresql_reads_them_back(value, expected):
    assert json_integer(value) == expected


def test_a_turn_number_written_with_an_exponent_reads_as_postgresql_reads_it_back():
    """The plan labels the turn and closes it with its number on both databases alike."""
    from sessions_app.log import recovery

    assert recovery.open_turn_label(1e16, 3) == recovery.open_turn_label(10**16, 3) == "turn 10000000000000000 (opened at seq 3)"
    for number in (1e16, 10**16):
        moment = parse_time("2026-01-01T00:00:00Z")
        events = [Event(0, "turn_start", moment, {"turn": number}), Event(1, "assistant_message", moment, {"tool_calls": []})]
        ends = [r for r in recovery.plan(events).repairs if r.type == "turn_end"]
        assert [r.data.get("turn") for r in ends] == [10**16]
