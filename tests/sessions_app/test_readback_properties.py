"""Whatever the append endpoint accepts reads back everywhere: every read endpoint
and every page answers 200 with the data as appended, on SQLite and PostgreSQL.

Hypothesis draws batches of every event type, well-formed and odd (tool_calls
as an object, a string or a list of non-objects; calls in this project's shape,
OpenAI's chat shape and as tool_use / function_call content blocks, with
arguments as JSON text, valid or not; integer, boolean and null
ids; content as text or parts; metadata null or not an object; replace ranges
with huge bounds; times with offsets; nesting up to the accepted depth and one
level past it; any Unicode, lone surrogates and NUL included; huge integers;
floats). Each batch goes through the real API; an accepted one is then read
back through every endpoint and page, recovered, read again, patched and read
again.

Budget: READBACK runs MAX_EXAMPLES examples, about 30 s per backend on a
2-core machine (examples share the test database; each uses its own session).
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal

import pytest
from django.test import Client
from hypothesis import HealthCheck, event, example, given, note, settings
from hypothesis import strategies as st

from sessions_app.models import Role
from tests.access import token_for
from tests.conftest import ApiClient

pytestmark = pytest.mark.django_db

# Team rule: a request body may nest at most 64 levels of objects and arrays,
# counted from the top-level body (depth 1). An appended event's `data` sits
# at depth 4 ({"events": [{"data": {...}}]}); deeper is 422 invalid_data.
MAX_BODY_DEPTH = 64
DATA_DEPTH = 4

MAX_EXAMPLES = 30
READBACK = settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    # One database and clients for all examples: every example makes its own session.
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)

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


# What the list search is asked: any text a URL carries (NUL included; a lone surrogate cannot be sent).
search_terms = st.one_of(st.text(max_size=12), st.sampled_from(["echo", "\x00", "props-"]))
# Three of four batches are ones the API must accept.
batches = st.one_of(batches_of(hostile=False), batches_of(hostile=False), batches_of(hostile=False), batches_of(hostile=True))

# What the API must answer --------------------------------------------------


def depth(value: object) -> int:
    if isinstance(value, dict):
        return 1 + max(map(depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(depth, value), default=0)
    return 0


def strings(value: object):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings(item)


def is_bad_text(text: str) -> bool:
    return "\x00" in text or any("\ud800" <= char <= "\udfff" for char in text)


def is_valid_time(value: object) -> bool:
    if value is None:
        return True
    if not isinstance(value, str):
        return False
    try:
        return datetime.fromisoformat(value).utcoffset() is not None
    except ValueError:
        return False


def is_valid_surface_op(type_: str, op: object) -> bool:
    if op is None:
        return True
    if type_ not in SURFACE:
        return False
    if op == "append":
        return True
    return (
        isinstance(op, list)
        and len(op) == 3
        and op[0] == "replace"
        and all(isinstance(bound, int) and not isinstance(bound, bool) for bound in op[1:])
        and 0 <= op[1] <= op[2]
    )


def acceptable(body: dict) -> bool:
    """Section 1's validation plus the team's rules on text and depth."""
    if depth(body) > MAX_BODY_DEPTH or any(is_bad_text(text) for text in strings(body)):
        return False
    for event in body["events"]:
        type_, data = event["type"], event["data"]
        if type_ not in SURFACE + BOOKKEEPING or not isinstance(data, dict):
            return False
        if not is_valid_surface_op(type_, data.get("surface_op")) or not is_valid_time(event.get("time")):
            return False
    return True


def same_json(left: object, right: object) -> bool:
    """JSON equality, type for type: numbers by decimal value (PostgreSQL's jsonb
    writes 1e+300 as its 301 digits), never a boolean for a number."""
    if isinstance(left, bool) or isinstance(right, bool) or left is None or right is None:
        return type(left) is type(right) and left == right
    if isinstance(left, int | Decimal) and isinstance(right, int | Decimal):
        return Decimal(left) == Decimal(right)
    if isinstance(left, dict) and isinstance(right, dict):
        return left.keys() == right.keys() and all(same_json(left[key], right[key]) for key in left)
    if isinstance(left, list) and isinstance(right, list):
        return len(left) == len(right) and all(map(same_json, left, right))
    return type(left) is type(right) and left == right


def exact_json(value: object) -> object:
    """`value` as the server reads it: floats as decimals, so no precision is lost comparing."""
    return json.loads(json.dumps(value), parse_float=Decimal)


def json_of(response) -> object:
    assert response["Content-Type"].startswith("application/json"), response["Content-Type"]
    return json.loads(response.content, parse_float=Decimal)


def assert_ok_json(response, where: str) -> object:
    assert response.status_code == 200, f"{where}: {response.status_code} {response.content[:500]!r}"
    return json_of(response)


# Reading back ---------------------------------------------------------------


def read_back_everywhere(api: ApiClient, browser: Client, session_id: str, appended: list[dict], q: str, *, pages: bool = True) -> dict:
    """Every read endpoint and page of the session; `appended` are the wire events
    stored so far, which `events` and the event JSON pages must give back as they are."""
    base = f"/api/v1/sessions/{session_id}"
    session = assert_ok_json(api.get(base), "session")
    assert session["event_count"] == len(appended)
    stored = assert_ok_json(api.get(f"{base}/events", {"limit": 5000}), "events")
    assert stored["next_seq"] == len(appended)
    assert [event["seq"] for event in stored["events"]] == list(range(len(appended)))
    for sent, got in zip(appended, stored["events"], strict=True):
        assert got["type"] == sent["type"]
        assert same_json(got["data"], exact_json(sent["data"])), (sent["data"], got["data"])
        if sent.get("time") is not None:
            assert datetime.fromisoformat(got["time"]) == datetime.fromisoformat(sent["time"])
    for endpoint in ("messages", "recovery-plan", "dangling-calls"):
        assert_ok_json(api.get(f"{base}/{endpoint}"), endpoint)
    exported = assert_ok_json(api.get(f"{base}/export"), "export")
    assert same_json(exported["events"], stored["events"])
    listed = api.get("/api/v1/sessions", {"q": q})
    if "\x00" in q:  # team rule: NUL is refused in the API's input, query parameters included
        assert listed.status_code == 422 and json_of(listed)["error"], listed.content
    else:
        assert_ok_json(listed, "session list")
    if not pages:
        return session
    page = f"/sessions/{session_id}"
    for path in (f"{page}/", f"{page}/?view=raw", f"{page}/recovery", f"{page}/lineage", "/"):
        response = browser.get(path)
        assert response.status_code == 200, f"{path}: {response.status_code} {response.content[:500]!r}"
    response = browser.get("/", {"q": q})
    assert response.status_code == 200, f"/?q={q!r}: {response.status_code}"
    for event in stored["events"]:
        shown = assert_ok_json(browser.get(f"{page}/events/{event['seq']}.json"), f"event {event['seq']} JSON")
        assert same_json(shown, event)
    return session


@pytest.fixture
def operator(django_user_model):
    """An operator of the default project, who may recover: a token client for the API, a logged-in browser client."""
    user = django_user_model.objects.create_user("operator", is_staff=True)
    token = token_for(user, role=Role.OPERATOR)
    browser = Client()
    browser.force_login(user)
    return ApiClient(token), browser


@READBACK
@given(batch=batches, q=search_terms, late_result=st.booleans())
# Defects found, kept as examples. A step_start outside any turn: its block was rendered as rows (500).
@example(batch=[{"type": "step_start", "data": {}}], q="", late_result=False)
# The shapes runtimes send: OpenAI's chat shape (arguments as JSON text, one of them valid JSON holding a
# lone surrogate), an Anthropic tool_use block and a Responses function_call item, in an open turn.
@example(
    batch=[
        {"type": "turn_start", "data": {"turn": 1}},
        {"type": "assistant_message", "data": {
            "content": [{"type": "tool_use", "id": "toolu_1", "name": "echo", "input": {"a": 1}},
                        {"type": "function_call", "call_id": "c9", "name": "read_file", "arguments": '"\\ud800"'}],
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "echo", "arguments": '{"x": [1, 2]}'}},
                           {"id": "c2", "type": "function", "function": {"name": "send_email", "arguments": '"\\ud800"'}}]}},
        {"type": "tool_call", "data": {"id": "c1", "type": "function", "function": {"name": "echo", "arguments": "{oops"}}},
    ],
    q="echo",
    late_result=True,
)
def test_whatever_the_api_accepts_reads_back_everywhere(api, operator, batch, q, late_result):
    operator_api, browser = operator
    session_id = f"props-{uuid.uuid4().hex}"
    assert api.post("/api/v1/sessions", {"id": session_id}).status_code == 201
    body = {"events": batch}
    note(f"append body: {json.dumps(body)[:3000]}")
    response = api.post(f"/api/v1/sessions/{session_id}/events", body)
    assert response.status_code < 500, f"{response.status_code} {response.content[:500]!r}"
    answer = json_of(response)
    event(f"append answered {response.status_code}")
    if not acceptable(body):
        assert 400 <= response.status_code < 500 and answer["detail"] and answer["error"], answer
        assert api.get(f"/api/v1/sessions/{session_id}").json()["event_count"] == 0
        return
    assert response.status_code == 201, answer
    appended = list(batch)
    session = read_back_everywhere(api, browser, session_id, appended, q)

    # Recover the open turns, then read it all again (the plan's repairs included).
    recovered = operator_api.post(f"/api/v1/sessions/{session_id}/recover", {"note": "props"})
    assert recovered.status_code == 200, recovered.content[:500]
    appended += recovered.json()["appended"]
    assert bool(session["open_turns"]) == bool(recovered.json()["appended"])
    if late_result:  # the real result of a call arriving after its synthetic one
        late = {"type": "tool_result", "data": {"tool_call_id": "c1", "content": "late", "metadata": None}}
        assert api.post(f"/api/v1/sessions/{session_id}/events", {"events": [late]}).status_code == 201
        appended.append(late)
    read_back_everywhere(api, browser, session_id, appended, q)

    # The turn-blind patch, then the API once more (the pages render its repairs as they did recovery's).
    patched = operator_api.post(f"/api/v1/sessions/{session_id}/patch-dangling-calls", {})
    assert patched.status_code == 200, patched.content[:500]
    appended += patched.json()["appended"]
    read_back_everywhere(api, browser, session_id, appended, q, pages=False)

    # A fork of the whole (now closed) log, and an import of its export, hold the same events.
    fork_id, import_id = f"{session_id}-fork", f"{session_id}-import"
    forked = api.post(f"/api/v1/sessions/{session_id}/fork", {"boundary": "last", "id": fork_id})
    assert forked.status_code == 201, forked.content[:500]
    read_back_everywhere(api, browser, fork_id, appended, q)
    blob = api.get(f"/api/v1/sessions/{session_id}/export").json()
    imported = api.client.post(
        f"/api/v1/sessions/import?id={import_id}", json.dumps(blob), content_type="application/json", headers=api.headers
    )
    assert imported.status_code == 201, imported.content[:500]
    assert imported.json()["warnings"] == []
    read_back_everywhere(api, browser, import_id, appended, q, pages=False)
