"""The append fast path: orjson, one screen of the batch, plain-tuple inserts.

It must answer and store exactly what the earlier path did: the same value or
error for any body, the same refusal (reason and index) for any batch, the
same rows, and one publish per commit.
"""

import json
import math
from collections import Counter

import pytest
from django.db import connection, transaction
from hypothesis import given, settings
from hypothesis import strategies as st

from sessions_app import services
from sessions_app.log import calls as log_calls
from sessions_app.log import events as log_events
from sessions_app.log import structure, values
from sessions_app.models import REPLACE_BOUND_MAX, AgentHour, CallSighting, Event, Session
from sessions_app.services import event_rows, publishing
from tests.sessions_app import factories as f

# Bodies ------------------------------------------------------------------

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**25), max_value=10**25)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4),
    max_leaves=12,
)
# Bytes that are often almost JSON: valid text, then cut, spliced or given a foreign token.
ODD_TOKENS = [b"NaN", b"-Infinity", b"1e400", b'"\\ud800"', b'"\\u0000"', b"18446744073709551616", b"-9223372036854775809",
              b"\xff", b"\xef\xbb\xbf", b",", b"[", b"}", b"01", b"1.", b'"\t"', b"9" * 30, b"\x00", b" ", b"\\"]


@st.composite
def bodies(draw) -> bytes:
    text = json.dumps(draw(json_values), ensure_ascii=draw(st.booleans())).encode("utf-8", "surrogatepass")
    action = draw(st.sampled_from(["keep", "cut", "insert", "replace"]))
    if action == "keep" or not text:
        return text
    at = draw(st.integers(0, len(text)))
    if action == "cut":
        return text[:at]
    token = draw(st.sampled_from(ODD_TOKENS))
    return text[:at] + token + text[at + (action == "replace") :]


def outcome(read, raw: bytes):
    try:
        return "value", read(raw)
    except (values.InvalidJSON, values.UnacceptableValue) as exc:
        return type(exc).__name__, str(exc)


def same(a, b) -> bool:
    """Equal as JSON values, with the type of each number (1 is not 1.0) and -0.0 kept apart."""
    if isinstance(a, float) or isinstance(b, float):
        return type(a) is type(b) and (a == b and math.copysign(1, a) == math.copysign(1, b))
    if isinstance(a, dict):
        return isinstance(b, dict) and list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


@settings(max_examples=400, deadline=None)
@given(bodies())
def test_the_fast_reader_gives_the_same_value_or_error_as_the_strict_one(raw):
    fast, strict = outcome(values.loads_fast, raw), outcome(values.loads, raw)
    assert fast[0] == strict[0]
    assert same(fast[1], strict[1]) if fast[0] == "value" else fast[1] == strict[1]


@pytest.mark.parametrize(
    "raw",
    [b'{"a": NaN}', b'{"a": 1e400}', b'{"a":\n  -Infinity}', b'{"a": 123456789012345678901234567890}',
     b'{"a": -9223372036854775809}', b'{"a": 18446744073709551616}', b'{"a": "\\ud800"}', b'{"a": "\\u0000"}',
     b"[" * 100_000, b'{"a": 1', b"\xff{}", b"\xef\xbb\xbf{}", b""],
)
def test_edge_bodies_read_as_before(raw):
    assert outcome(values.loads_fast, raw) == outcome(values.loads, raw)


def test_big_integers_stay_exact():
    assert values.loads_fast(b'{"n": 123456789012345678901234567890, "m": -9223372036854775809}') == {
        "n": 123456789012345678901234567890, "m": -9223372036854775809
    }


# Validation ----------------------------------------------------------------

bad_values = st.sampled_from(["a\x00b", "\ud800", "ok", 1, 2.5, None, [], {}]) | st.recursive(
    st.just(0), lambda c: st.lists(c, min_size=1, max_size=1), max_leaves=80
)
items = st.one_of(
    st.builds(lambda c: f.user(c), st.sampled_from(["hi", "\x00", "\udfff"])),
    st.builds(
        lambda t, k, v, time: {"type": t, "data": {k: v}, **({"time": time} if time is not None else {})},
        st.sampled_from(["user_message", "tool_call", "turn_start", "nonsense", None]),
        st.sampled_from(["content", "surface_op", "\x00key", "id"]),
        bad_values,
        st.sampled_from([None, "2025-01-01T00:00:00Z", "yesterday", "\x00", 5]),
    ),
    st.builds(lambda extra: {**f.user(), "extra": extra}, bad_values),
    st.sampled_from([None, 3, "text", []]),
)


def refusal(call):
    try:
        call()
    except log_events.InvalidEvent as exc:
        return ("invalid_event", exc.index, exc.reason)
    except values.UnacceptableValue as exc:  # outside data: the API names the event too (api.on_unacceptable_value)
        parts = exc.problem.parts
        if len(parts) > 1 and parts[0] == "events" and isinstance(parts[1], int):
            return ("invalid_event", parts[1], "invalid_data", exc.problem)
        return ("unacceptable", parts, exc.problem.kind)
    return None


def reference_validation(batch):
    """The earlier view: validate_batch event by event, then the items' other fields."""
    log_events.validate_batch(batch)
    values.check({"events": [{k: v for k, v in item.items() if k != "data"} for item in batch]})


def fast_validation(batch):
    storable = values.surely_storable(batch, level=log_events.DATA_LEVEL - 2)
    log_events.validate_batch(batch, values_checked=storable)
    if not storable:
        values.check({"events": [{k: v for k, v in item.items() if k != "data"} for item in batch]})


@settings(max_examples=300, deadline=None)
@given(st.lists(items, min_size=1, max_size=6))
def test_the_screen_refuses_exactly_what_the_core_refuses(batch):
    assert refusal(lambda: fast_validation(batch)) == refusal(lambda: reference_validation(batch))


@pytest.mark.django_db
@pytest.mark.parametrize(
    "batch, index, reason",
    [
        ([f.user(), f.user("a\x00")], 1, "invalid_data"),
        ([f.user(), {"type": "nope", "data": {"content": "\ud800"}}], 1, "unknown_event_type"),
        ([f.user("\ud800"), {"type": "nope", "data": {}}], 0, "invalid_data"),
        ([f.user(), f.user(), {**f.user(), "time": "yesterday"}], 2, "invalid_time"),
        ([f.user(), {"type": "user_message", "data": {"content": "x", "surface_op": "append"}, "meta": "\x00"}], 1, "invalid_data"),
        ([f.user(), {"type": "tool_call", "data": {"surface_op": "append"}}], 1, "surface_op_on_non_surface_event"),
    ],
)
def test_the_api_names_the_same_index_and_reason(api, batch, index, reason):
    api.post("/api/v1/sessions", {"id": "v"})
    raw = json.dumps({"events": batch}).encode("utf-8", "surrogatepass")
    response = api.post_raw("/api/v1/sessions/v/events", raw)
    assert response.status_code == 422, response.content
    assert (response.json()["error"], response.json()["index"], response.json()["reason"]) == ("invalid_event", index, reason)
    assert refusal(lambda: reference_validation(values.loads(raw)["events"]))[:3] == ("invalid_event", index, reason)
    assert Session.objects.get(pk="v").event_count == 0


# Stored rows ----------------------------------------------------------------


def reference_store(session: Session, events) -> list[Event]:
    """The earlier `store_events`: one Event model instance per event, bulk_create (kept here as the reference)."""
    from django.utils import timezone

    now = timezone.now()
    turn_stack, step_stack, strays, rows = list(session.turn_stack), list(session.step_stack), list(session.stray_turn_ends), []
    for seq, new in enumerate(events, start=session.event_count):
        placement = structure.place(turn_stack, step_stack, seq, new.type)
        if new.type == "turn_end" and placement.turn_seq is None:
            strays.append(seq)
        replaced = log_events.replace_range(new.data)
        rows.append(
            Event(
                session=session, seq=seq, type=new.type, time=new.time or now, received_at=now, data=new.data,
                call_id=log_events.call_id(new.data) if new.type in event_rows.CALL_ID_TYPES else None,
                turn_seq=placement.turn_seq, step_seq=placement.step_seq,
                replace_start=min(replaced[0], REPLACE_BOUND_MAX) if replaced else None,
                replace_stop=min(replaced[1], REPLACE_BOUND_MAX) if replaced else None,
            )
        )
    Event.objects.bulk_create(rows)
    sightings = []
    for row in rows:
        if row.type != "assistant_message":
            continue
        names = log_calls.sighting_names(row.data)
        sightings += [CallSighting(session=session, seq=row.seq, call_id=cid, tool_name=name[:200]) for cid, name in names.items()]
    CallSighting.objects.bulk_create(sightings)
    session.event_count += len(rows)
    session.turn_stack, session.step_stack, session.interrupted, session.stray_turn_ends = turn_stack, step_stack, bool(turn_stack), strays
    session.last_event_at, session.last_received_at, session.last_activity_at = rows[-1].time, now, now
    fields = ["event_count", "turn_stack", "step_stack", "interrupted", "stray_turn_ends", "last_event_at", "last_received_at", "last_activity_at"]
    if not turn_stack and session.repeated_failures_at is not None:
        session.repeated_failures_at = None
        fields.append("repeated_failures_at")
    session.save(update_fields=fields)
    for hour, turns in Counter(event_rows.hour_of(now) for r in rows if r.type == "turn_start").items():
        event_rows.count_for_agent(session, at=hour, turns=turns)
    return rows


def varied_batch() -> list[dict]:
    long_id = "x" * 300  # stored as its sha256 (CallIdField)
    return [
        {**f.user("héllo ☃ \U0001f600"), "time": "2025-03-01T10:00:00.123456+02:00"},
        {**f.event("turn_start", turn=1), "time": "2025-03-01T09:00:00Z"},
        f.event("step_start", turn=1, step=1),
        {"type": "assistant_message", "data": {"content": "", "tool_calls": [
            {"id": "a", "name": "search", "arguments": {"q": 1}}, {"id": 7, "name": 5}, {"id": long_id, "name": "n" * 300}, {"id": "a", "name": "dup"},
            {"id": "oa", "type": "function", "function": {"name": "charge_card", "arguments": "{\"amount\": 1}"}}, {"id": "b", "name": True},
        ], "metadata": {"big": 123456789012345678901234567890, "f": 1.5e300, "neg": -0.0}}},
        {"type": "tool_call", "data": {"id": long_id, "name": "n"}},
        {"type": "tool_result", "data": {"tool_call_id": "a", "content": "ok", "id": "ignored"}},
        {"type": "tool_result", "data": {"tool_call_id": True, "content": "odd id"}},
        {"type": "assistant_message", "data": {"content": "single", "tool_calls": {"id": "s", "name": "one"}}},
        f.event("step_end", turn=1, step=1, outcome="ok"),
        {"type": "system_message", "data": {"content": "summary", "surface_op": ["replace", 0, 10**30]}},
        {"type": "user_message", "data": {"content": "c", "surface_op": ["replace", 1, 2]}},
        f.event("turn_end", turn=1, steps=1, reason="complete"),
        f.event("turn_end", turn=9, steps=0, reason="stray"),
        f.event("turn_start", turn=2),
    ]


EVENT_COLUMNS = ["seq", "type", "time", "received_at", "data", "call_id", "turn_seq", "step_seq", "replace_start", "replace_stop"]
SESSION_COLUMNS = ["event_count", "turn_stack", "step_stack", "interrupted", "stray_turn_ends", "last_event_at", "last_received_at", "last_activity_at", "repeated_failures_at"]


def stored(session_id: str):
    """Every column as the database holds it (raw SQL: text as stored on SQLite), and as the ORM reads it."""
    quote = connection.ops.quote_name
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {', '.join(quote(c) for c in EVENT_COLUMNS)} FROM {quote(Event._meta.db_table)} WHERE session_id = %s ORDER BY seq", [session_id]
        )
        raw_events = cursor.fetchall()
        cursor.execute(
            f"SELECT seq, call_id, tool_name FROM {quote(CallSighting._meta.db_table)} WHERE session_id = %s ORDER BY seq, call_id", [session_id]
        )
        raw_sightings = cursor.fetchall()
    return {
        "raw_events": raw_events,
        "events": list(Event.objects.filter(session_id=session_id).order_by("seq").values_list(*EVENT_COLUMNS)),
        "sightings": raw_sightings,
        "session": Session.objects.filter(pk=session_id).values_list(*SESSION_COLUMNS).get(),
    }


@pytest.mark.django_db
def test_the_fast_insert_stores_the_same_rows_as_the_orm_did(monkeypatch):
    from django.utils import timezone

    fixed = timezone.now()
    monkeypatch.setattr(timezone, "now", lambda: fixed)  # events without a time get the same append time
    batches = [varied_batch(), [f.user("second batch"), f.event("turn_end", turn=2, steps=0, reason="complete")]]
    for sid in ("old", "new"):
        services.create_session(session_id=sid, agent_name=f"agent-{sid}")
    for batch in batches:
        with transaction.atomic():
            reference_store(event_rows.locked_session("old"), log_events.validate_batch(batch))
        services.append_events(session_id="new", events=log_events.validate_batch(batch))
    old, new = stored("old"), stored("new")
    assert len(new["raw_events"]) == 16 and len(new["sightings"]) == 6
    assert new == old
    assert {(cid, name) for _, cid, name in new["sightings"]} >= {("oa", "charge_card"), ("b", "true"), ("7", "5")}

    def hours(agent):
        return list(AgentHour.objects.filter(agent_name=agent).order_by("hour").values_list("hour", "turns", "sessions", "crashed_turns"))

    assert hours("agent-new") == hours("agent-old") and sum(t for _, t, _, _ in hours("agent-new")) == 2


@pytest.mark.django_db
def test_the_results_read_like_events():
    services.create_session(session_id="r")
    result = services.append_events(session_id="r", events=log_events.validate_batch([f.user("a"), f.event("turn_start", turn=1)]))
    assert [e.to_log_event() for e in result.events] == [e.to_log_event() for e in Event.objects.filter(session_id="r").order_by("seq")]


# Publishing -----------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_an_api_append_is_published_once_after_commit_with_the_stored_events(api, monkeypatch):
    sent = []
    monkeypatch.setattr(publishing, "_send", lambda messages: sent.append(messages))
    api.post("/api/v1/sessions", {"id": "pub"})
    sent.clear()
    batch = varied_batch()
    response = api.post("/api/v1/sessions/pub/events", {"events": batch})
    assert response.status_code == 201
    assert len(sent) == 1
    (group, message), changed = sent[0]
    assert group == services.session_group("pub") and message["type"] == "session_events" and changed == publishing.session_changed("pub")
    # The events as appended (data as sent: PostgreSQL's jsonb reorders keys on read), the stored times.
    times = [log_events.format_time(t) for t in Event.objects.filter(session_id="pub").order_by("seq").values_list("time", flat=True)]
    expected = [{"seq": i, "type": item["type"], "time": times[i], "data": json.loads(json.dumps(item["data"]))} for i, item in enumerate(batch)]
    assert message["events"] == expected
    # A replayed Idempotency-Key and a refused batch publish nothing.
    sent.clear()
    assert api.post("/api/v1/sessions/pub/events", {"events": [f.user()]}, **{"Idempotency-Key": "k"}).status_code == 201
    assert api.post("/api/v1/sessions/pub/events", {"events": [f.user()]}, **{"Idempotency-Key": "k"}).status_code == 201
    assert api.post("/api/v1/sessions/pub/events", {"events": [f.user(), f.user("\x00")]}).status_code == 422
    assert api.post("/api/v1/sessions/pub/events", {"events": [f.user()], "expected_seq": 0}).status_code == 409
    assert len(sent) == 1 and [e["seq"] for e in sent[0][0][1]["events"]] == [len(batch)]
