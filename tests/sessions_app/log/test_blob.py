import json
from datetime import UTC, datetime

import pytest
from hypothesis import given

from sessions_app.log.blob import UnsupportedVersion, followed_patch_seqs, read_blob, write_blob
from sessions_app.log.events import Event, NewEvent
from sessions_app.log.values import UnacceptableValue

from .strategies import T0, events_of, logs, message

NOW = datetime(2026, 5, 5, tzinfo=UTC)


def through_json(blob: dict) -> dict:
    return json.loads(json.dumps(blob))


def test_write_blob_is_the_reference_shape():
    hello = {"content": "hi", "name": None, "metadata": {}}
    events = events_of([("user_message", hello), ("turn_start", {"turn": 1})])
    assert write_blob(events) == {
        "version": 2,
        "events": [
            {"seq": 0, "type": "user_message", "time": "2026-01-01T00:00:00Z",
             "data": {"content": "hi", "name": None, "metadata": {}}},
            {"seq": 1, "type": "turn_start", "time": "2026-01-01T00:00:01Z", "data": {"turn": 1}},
        ],
        "messages": [{"role": "user", "content": "hi", "tool_calls": [], "tool_call_id": None, "name": None,
                      "metadata": {}, "reasoning_content": None, "created_at": "2026-01-01T00:00:00Z"}],
        "tool_calls": [], "system_prompt": None, "deps": {},
        "usage": {"requests": 0, "tool_calls": 0, "input_tokens": 0, "output_tokens": 0,
                  "total_tokens": 0, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0},
        "needs_response": False, "iteration": 0, "max_iterations": 10,
        "started_at": None, "agent_name": None,
    }  # fmt: skip


def test_extra_keys_travel_at_the_top_level_and_come_back():
    parent = {"session_id": "p", "seed_length": 3}
    blob = write_blob([], agent_name="bot", extra={"session": {"id": "s"}, "parent": parent})
    assert (blob["agent_name"], blob["session"], blob["parent"]) == ("bot", {"id": "s"}, parent)
    assert read_blob(through_json(blob), now=NOW).extra == {"session": {"id": "s"}, "parent": parent}
    assert read_blob({"version": 2, "events": []}, now=NOW).extra == {}
    with pytest.raises(ValueError):
        write_blob([], extra={"version": 3})


@given(logs())
def test_write_then_read_round_trips_every_event(events):
    loaded = read_blob(through_json(write_blob(events)), now=NOW)
    assert loaded.events == [NewEvent(e.type, e.data, e.time) for e in events]
    assert loaded.warnings == []


def test_microseconds_survive_the_round_trip():
    events = [Event(0, "user_message", datetime(2026, 1, 1, 0, 0, 0, 7, tzinfo=UTC), message("hi"))]
    assert read_blob(through_json(write_blob(events)), now=NOW).events[0].time == events[0].time


@pytest.mark.parametrize("version", ["2", True, 3, 0, 2.0, None])
def test_only_the_integers_1_and_2_are_supported(version):
    with pytest.raises(UnsupportedVersion):
        read_blob({"version": version, "events": []}, now=NOW)


@pytest.mark.parametrize(
    "blob, where",
    [
        ({"version": 2, "events": [{"type": "user_message", "data": {"content": "a\ud800"}}]}, "events[0].data.content"),
        ({"version": 1, "messages": [{"role": "user", "content": "\x00"}]}, "messages[0].content"),
        ({"version": 2, "agent_name": "bot\x00", "events": []}, "agent_name"),
        ({"version": 2, "events": [], "deps": json.loads("[" * 64 + "]" * 64)}, "deps[0]"),
    ],
)
def test_a_blob_holding_unstorable_text_or_nesting_too_deep_is_refused_whole(blob, where):
    with pytest.raises(UnacceptableValue) as refused:
        read_blob(blob, now=NOW)
    assert refused.value.detail.startswith(where)


def test_a_blob_that_is_not_an_object_is_unsupported():
    with pytest.raises(UnsupportedVersion):
        read_blob([{"version": 2}], now=NOW)


def test_bad_events_are_dropped_with_a_warning_that_later_seqs_shift():
    blob = {
        "version": 2,
        "events": [
            {"seq": 0, "type": "user_message", "time": "2026-01-01T00:00:00Z", "data": {"content": "a"}},
            {"seq": 1, "type": "thought", "time": "2026-01-01T00:00:01Z", "data": {}},
            {"seq": 2, "type": "user_message", "time": "2026-01-01T00:00:02Z", "data": "b"},
            "junk",
            {"seq": 4, "type": "turn_start", "time": "2026-01-01T00:00:04Z", "data": {"turn": 1}},
        ],
    }
    loaded = read_blob(blob, now=NOW)
    assert [e.type for e in loaded.events] == ["user_message", "turn_start"]
    assert len(loaded.warnings) == 3
    assert loaded.warnings[0].startswith("events[1] (seq 1) dropped: \"thought\" is not an event type")
    assert loaded.warnings[1].startswith("events[2] (seq 2) dropped:")
    assert loaded.warnings[2].startswith("events[3] dropped:")
    assert all("later event's seq shifts" in warning for warning in loaded.warnings)


@pytest.mark.parametrize("time", ["yesterday", "2026-01-01T00:00:00", None, 17])
def test_an_unparseable_or_missing_time_becomes_the_load_time(time):
    blob = {"version": 2, "events": [{"type": "user_message", "time": time, "data": {}}]}
    assert read_blob(blob, now=NOW).events == [NewEvent("user_message", {}, NOW)]


def test_times_are_read_as_utc():
    blob = {"version": 2, "events": [{"type": "user_message", "time": "2026-01-01T02:00:00+02:00", "data": {}}]}
    assert read_blob(blob, now=NOW).events[0].time == T0


def test_a_malformed_surface_op_is_removed_and_the_event_kept():
    events = [
        {"type": "user_message", "data": {"content": "a", "surface_op": ["replace", 2, 1]}},
        {"type": "turn_start", "data": {"turn": 1, "surface_op": "append"}},
        {"type": "user_message", "data": {"content": "b", "surface_op": ["replace", 0, 0]}},
        {"type": "user_message", "data": {"content": "c", "surface_op": None}},
    ]
    loaded = read_blob({"version": 2, "events": events}, now=NOW)
    assert [e.data for e in loaded.events] == [
        {"content": "a"},
        {"turn": 1},
        {"content": "b", "surface_op": ["replace", 0, 0]},
        {"content": "c", "surface_op": None},
    ]
    assert [w.split(":")[0] for w in loaded.warnings] == ["events[0] (seq null)", "events[1] (seq null)"]
    assert all("surface_op removed" in warning for warning in loaded.warnings)


V1_MESSAGES = [
    {"role": "system", "content": "be brief"},
    {"role": "user", "content": "hi", "name": "ann", "metadata": {"k": 1}, "created_at": "2026-01-01T00:00:00Z"},
    {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "name": "echo"}], "reasoning_content": "hm"},
    {"role": "critic", "content": "?"},
    {"role": "tool", "content": "ok", "tool_call_id": "c1", "name": "echo"},
]


def test_a_v1_blob_is_seeded_from_its_messages():
    loaded = read_blob({"version": 1, "messages": V1_MESSAGES}, now=NOW)
    assert loaded.events == [
        NewEvent("system_message", {"content": "be brief", "name": None, "metadata": {}}, NOW),
        NewEvent("user_message", {"content": "hi", "name": "ann", "metadata": {"k": 1}}, T0),
        NewEvent(
            "assistant_message",
            {"content": "", "name": None, "metadata": {}, "tool_calls": [{"id": "c1", "name": "echo"}],
             "reasoning_content": "hm"},
            NOW,
        ),  # fmt: skip
        NewEvent("tool_result", {"content": "ok", "name": "echo", "metadata": {}, "tool_call_id": "c1"}, NOW),
    ]
    assert len(loaded.warnings) == 1 and loaded.warnings[0].startswith('messages[3] dropped: role "critic"')


def test_a_v2_blob_without_an_events_list_is_seeded_from_messages():
    loaded = read_blob({"version": 2, "events": None, "messages": V1_MESSAGES[:2]}, now=NOW)
    assert [e.type for e in loaded.events] == ["system_message", "user_message"]


def test_a_v1_blob_ignores_its_events():
    blob = {"version": 1, "events": [{"type": "turn_start", "data": {}}], "messages": V1_MESSAGES[:1]}
    assert [e.type for e in read_blob(blob, now=NOW).events] == ["system_message"]


def test_notes_travel_as_an_extra_key():
    notes = [{"seq": 0, "text": "checked", "tags": ["verified"], "author": "ana"}]
    assert read_blob(through_json(write_blob([], extra={"notes": notes})), now=NOW).extra == {"notes": notes}


def test_each_kept_events_blob_seq_is_followed_to_its_new_seq():
    def item(seq, type="user_message"):
        return {"seq": seq, "type": type, "time": "2026-01-01T00:00:00Z", "data": {}}

    # 0 kept -> 0; 1 dropped (and given again at the end: still no event for sure); 5 kept -> 1;
    # 7 twice (not sure which); "8" not an integer; 9 kept -> 5 (the two 7s and "8" are kept events too)
    stored = [item(0), item(1, "hologram"), item(5), item(7), item(7), item("8"), item(9), "junk", item(1)]
    loaded = read_blob({"version": 2, "events": stored}, now=NOW)
    assert len(loaded.events) == 7
    assert loaded.seqs == {0: 0, 5: 1, 9: 5}
    assert (loaded.follow_seq(5), loaded.follow_seq(1), loaded.follow_seq(7), loaded.follow_seq(42)) == (1, None, None, None)


def test_a_v1_blob_follows_no_seqs():
    assert read_blob({"version": 1, "messages": [{"role": "user", "content": "x"}]}, now=NOW).seqs == {}


def test_the_seqs_of_patch_results_follow_their_events_and_only_tool_results_are_kept():
    def item(seq, type="tool_result"):
        return {"seq": seq, "type": type, "time": "2026-01-01T00:00:00Z", "data": {"tool_call_id": "c1"}}

    # 3 dropped (unknown type), so 4 lands at 2 and 6 at 3; 5 is a user message; "6" and 9 name nothing.
    stored = [item(0, "assistant_message"), item(2), item(3, "hologram"), item(4), item(5, "user_message"), item(6)]
    blob = {"version": 2, "events": stored, "dangling_patch_seqs": [2, 4, 4, 5, "6", 9, 6]}
    loaded = read_blob(blob, now=NOW)
    warnings = []
    assert followed_patch_seqs(loaded, warnings) == [1, 2, 4]
    assert warnings == [
        "dangling_patch_seqs: seq 5 is not an imported tool_result; ignored",
        'dangling_patch_seqs: seq "6" is not an imported tool_result; ignored',
        "dangling_patch_seqs: seq 9 is not an imported tool_result; ignored",
    ]


def test_patch_seqs_that_are_absent_say_nothing_and_anything_but_a_list_is_ignored_with_a_warning():
    warnings = []
    assert followed_patch_seqs(read_blob({"version": 2, "events": []}, now=NOW), warnings) == []
    assert warnings == []
    assert followed_patch_seqs(read_blob({"version": 2, "events": [], "dangling_patch_seqs": {"4": 1}}, now=NOW), warnings) == []
    assert warnings == ['dangling_patch_seqs {"4": 1} is not a list of seqs; ignored']
