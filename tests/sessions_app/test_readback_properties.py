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
again. The batches are drawn by tests/wire_batches.py.

Budget: READBACK runs MAX_EXAMPLES examples, about 30 s per backend on a
2-core machine (examples share the test database; each uses its own session).
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime
from decimal import Decimal

import pytest
from django.test import Client
from hypothesis import HealthCheck, event, example, given, note, settings
from hypothesis import strategies as st

from sessions_app.models import Role
from tests.access import token_for
from tests.conftest import ApiClient
from tests.wire_batches import BOOKKEEPING, MAX_BODY_DEPTH, SURFACE, batches

pytestmark = pytest.mark.django_db

MAX_EXAMPLES = 30
READBACK = settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    # One database and clients for all examples: every example makes its own session.
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)

# What the list search is asked: any text a URL carries (NUL included; a lone surrogate cannot be sent).
search_terms = st.one_of(st.text(max_size=12), st.sampled_from(["echo", "\x00", "props-"]))

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
