"""One call state everywhere, as a property: for random logs, every call's state in
`GET /api/v1/sessions/{id}/calls?all=true` is log.ledger's; a call the recovery plan owes reads
the plan's risk once the session is not running; the strategies' "completed" calls are exactly
those that read `completed` or `error` (or `superseded`, when a result marked synthetic came
before the tool's own: section 8.1 says the tool ran, rule 1 that a stand-in answered first).
All of it before and after recovery, a dangling-call patch, a late real result (which
supersedes a stand-in), more rounds of the same, and a fork or an import (whose calls are the
parent's at the seed point), on a real database (SQLite; PostgreSQL with DATABASE_URL).

The logs are the read-back property's accepted batches (tests/wire_batches.py: odd ids, shapes
and crashed turns), emitter-shaped logs (tests/sessions_app/log/strategies.py: nested and
double-started turns, compactions) and logs dense in a few call ids. The expected states are
computed here from what the API gives back (the events, and the seqs the patch answered with,
carried by the test itself to forks and imports), never from the selectors under test.
CALL_STATE_EXAMPLES=600 runs a longer search (add --timeout 1400).

No tool policy exists, so every call's class is `unknown` and the plan's strategies list every
call of an open turn (api.md lists only external_effect and unknown ones there).

The session page's cards carry `data-call-id` and `data-state`:
`test_every_card_reads_the_calls_state` holds them to /calls too.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from datetime import UTC, datetime, timedelta
from html import unescape
from html.parser import HTMLParser

import pytest
from django.test import Client
from django.utils import timezone
from hypothesis import HealthCheck, event, example, given, note, settings
from hypothesis import strategies as st

from sessions_app.log import ledger
from sessions_app.log.events import Event, call_id
from sessions_app.log.recovery import COMPLETED
from sessions_app.models import Role, Session
from tests.access import member, token_for
from tests.conftest import ApiClient
from tests.sessions_app.log.strategies import logs
from tests.wire_batches import batches_of

pytestmark = pytest.mark.django_db

MAX_EXAMPLES = int(os.environ.get("CALL_STATE_EXAMPLES", "50"))  # about 20 s per backend on 2 cores
PROPERTY = settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def as_wire(events: list[Event]) -> list[dict]:
    return [{"type": e.type, "data": e.data} for e in events]


# Logs dense in calls: a few ids sighted, dispatched and answered (real, error, synthetic with and
# without a risk) in and out of nested turns, results before sightings, compactions hiding some.
call_ids = st.sampled_from(["c1", "c2", "c3"])
names = st.sampled_from(["echo", "send_email"])
result_metadata = st.sampled_from(
    [{}, None, {"is_error": True}, {"error": "boom"}, {"synthetic": True}, {"synthetic": True, "risk": "tool_not_started"}]
)
dense_events = st.one_of(
    st.sampled_from(
        [{"type": "turn_start", "data": {"turn": 1}}, {"type": "turn_end", "data": {"reason": "complete"}},
         {"type": "step_start", "data": {}}, {"type": "step_end", "data": {"outcome": "ok"}}]
    ),  # fmt: skip
    st.lists(st.tuples(call_ids, names), max_size=2).map(
        lambda calls: {"type": "assistant_message", "data": {"content": "", "tool_calls": [{"id": i, "name": n} for i, n in calls]}}
    ),
    st.tuples(call_ids, names).map(lambda call: {"type": "tool_call", "data": {"id": call[0], "name": call[1]}}),
    st.tuples(call_ids, result_metadata).map(
        lambda r: {"type": "tool_result", "data": {"tool_call_id": r[0], "content": "r", "metadata": r[1]}}
    ),
    st.tuples(st.integers(0, 8), st.integers(0, 3)).map(
        lambda r: {"type": "user_message", "data": {"content": "summary", "surface_op": ["replace", r[0], r[0] + r[1]]}}
    ),
)
dense_logs = st.lists(dense_events, min_size=1, max_size=12)
random_logs = st.one_of(batches_of(hostile=False), logs().map(as_wire), dense_logs)
# What arrives after the first round (recovery, patch, late results): the same ids again, new turns, crashes.
later_batches = st.lists(dense_logs, max_size=2)
# Where the second fork ends: an index into the log, modulo its length (one inside a turn is refused).
boundaries = st.integers(0, 40)


# Reading the API --------------------------------------------------------------


def ok(response, where: str) -> dict:
    assert response.status_code in (200, 201), f"{where}: {response.status_code} {response.content[:500]!r}"
    return json.loads(response.content)


class Reader:
    """One session's reads over the API, and the patch seqs the test itself saw the patch write."""

    def __init__(self, api: ApiClient, session_id: str, patch_seqs: set[int] | None = None):
        self.api, self.id, self.patch_seqs = api, session_id, set(patch_seqs or ())

    def get(self, tail: str = "", params=None) -> dict:
        return ok(self.api.get(f"/api/v1/sessions/{self.id}{tail}", params), f"{self.id}{tail}")

    def calls(self) -> list[dict]:
        return self.get("/calls", {"all": "true"})["calls"]

    def events(self) -> list[dict]:
        stored = self.get("/events", {"limit": 5000})
        assert stored["next_seq"] == len(stored["events"])
        return stored["events"]

    def status(self) -> str:
        return self.get()["status"]


def quiet(*session_ids: str) -> None:
    """The sessions went quiet an hour ago: neither running nor active (a crash reads stalled)."""
    hour_ago = timezone.now() - timedelta(hours=1)
    Session.objects.filter(pk__in=session_ids).update(last_activity_at=hour_ago, last_received_at=hour_ago)


def ledger_states(events: list[dict], *, status: str, patch_seqs: set[int]) -> list[ledger.CallState]:
    stored = [Event(e["seq"], e["type"], T0, e["data"]) for e in events]
    return ledger.call_states(stored, running=status == "running", active=status == "active", patch_seqs=patch_seqs)


def state_fields(call) -> tuple:
    """What the ledger decides of a call, from a CallState or a Call of the API."""
    if isinstance(call, ledger.CallState):  # name and arguments as JSON carries them
        shown = json.loads(json.dumps({"name": call.name, "arguments": call.arguments}))
        return (call.call_id, call.state, call.result_seq, call.seq, call.turn_seq, shown["name"], shown["arguments"])
    return (call["call_id"], call["state"], call["result_seq"], call["seq"], call["turn_seq"], call["name"], call["arguments"])


def stood_in_first(events: list[dict], call: dict) -> bool:
    """A result marked synthetic answered the call before its first real one (an agent may mark its own):
    section 8.1 reads the call as completed (the tool ran), rule 1 as superseded."""
    return call["state"] == ledger.SUPERSEDED and any(
        e["type"] == "tool_result" and e["seq"] < call["result_seq"] and ledger.result_kind(as_event(e), ()) == ledger.SYNTHETIC
        and ledger_id(e) == call["call_id"]
        for e in events
    )  # fmt: skip


def as_event(event: dict) -> Event:
    return Event(event["seq"], event["type"], T0, event["data"])


def ledger_id(event: dict) -> str | None:
    """The call id a tool_result answers, as section 1 reads it."""
    return call_id(event["data"])


# The property, checked at every point of the story ----------------------------


def check(reader: Reader, *, completed_before: set[str] = frozenset(), cards: Client | None = None) -> dict[str, dict]:
    """Every property at this point of the session's story; the calls by id."""
    status = reader.status()
    events = reader.events()
    listed = reader.calls()
    by_id = {c["call_id"]: c for c in listed}
    note(f"{reader.id} ({status}): {[state_fields(c) for c in listed]}")
    # (a) the API states what the pure ledger states, call for call, in order of first sighting.
    expected = ledger_states(events, status=status, patch_seqs=reader.patch_seqs)
    assert [state_fields(c) for c in listed] == [state_fields(c) for c in expected]
    assert reader.status() == status  # nothing moved while reading
    plan = reader.get("/recovery-plan")
    # (b) a call the plan owes reads its risk once the session is not running (pending while it is).
    for owed in plan["owed_calls"]:
        assert by_id[owed["id"]]["state"] == ("pending" if status == "running" else owed["risk"]), owed
    # (c) the strategies' "completed" calls are exactly those reading completed or error.
    for turn in plan["strategies"]:
        for call in turn["calls"]:
            read = by_id[call["id"]]
            if call["state"] == COMPLETED:
                assert read["state"] in (ledger.COMPLETED, ledger.ERROR) or stood_in_first(events, read), (call, read)
            else:
                assert read["state"] not in (ledger.COMPLETED, ledger.ERROR), (call, read)
    # ... and a call they read as completed before recovery still is afterwards.
    for cid in completed_before:
        assert by_id[cid]["state"] in (ledger.COMPLETED, ledger.ERROR) or stood_in_first(events, by_id[cid]), by_id[cid]
    if cards is not None:
        check_cards(cards, reader.id, listed)
    return by_id


def strategies_completed(reader: Reader) -> set[str]:
    plan = reader.get("/recovery-plan")
    return {call["id"] for turn in plan["strategies"] for call in turn["calls"] if call["state"] == COMPLETED}


def late_result(reader: Reader, cid: str) -> int:
    """The call's real result arriving late; its seq."""
    body = {"events": [{"type": "tool_result", "data": {"tool_call_id": cid, "content": "late", "metadata": {}}}]}
    return ok(reader.api.post(f"/api/v1/sessions/{reader.id}/events", body), "late result")["first_seq"]


def same_calls_but_the_session(left: list[dict], right: list[dict]) -> bool:
    def shown(calls):
        return [{k: v for k, v in c.items() if k != "session_id"} for c in calls]

    return shown(left) == shown(right)


def round_of(reader: Reader, cards: Client | None) -> None:
    """After an append: the checks, then recovery, a late result for a call it answered, the patch,
    and a late result for a call the patch answered, each followed by the checks."""
    operator, session_id = reader.api, reader.id
    check(reader, cards=cards)  # running or active
    quiet(session_id)
    check(reader, cards=cards)  # stalled or clean
    completed_before = strategies_completed(reader)

    recovered = ok(operator.post(f"/api/v1/sessions/{session_id}/recover", {"note": "props"}), "recover")["appended"]
    after = check(reader, completed_before=completed_before, cards=cards)
    synthetic = {e["seq"] for e in recovered if e["type"] == "tool_result"}
    stand_ins = [cid for cid, c in after.items() if c["result_seq"] in synthetic]
    assert sorted(after[cid]["result_seq"] for cid in stand_ins) == sorted(synthetic)  # each repair decides its call
    event(f"recovery appended {len(synthetic)} results")
    if stand_ins:
        seq = late_result(reader, stand_ins[0])
        later = check(reader, completed_before=completed_before, cards=cards)[stand_ins[0]]
        assert (later["state"], later["result_seq"]) == (ledger.SUPERSEDED, seq)

    preview = reader.get("/dangling-calls")
    patched = ok(operator.post(f"/api/v1/sessions/{session_id}/patch-dangling-calls", {"digest": preview["digest"]}), "patch")
    reader.patch_seqs |= {e["seq"] for e in patched["appended"]}
    quiet(session_id)
    after_patch = check(reader, completed_before=completed_before, cards=cards)
    answered = {ledger_id(e): e["seq"] for e in patched["appended"]}
    event(f"patch appended {len(answered)} results")
    for cid, seq in answered.items():  # a patched call with no other result reads no_result, decided by the patch
        if after[cid]["result_seq"] is None:
            assert (after_patch[cid]["state"], after_patch[cid]["result_seq"]) == (ledger.NO_RESULT, seq)
    if answered:
        cid = next(iter(answered))
        seq = late_result(reader, cid)
        later = check(reader, completed_before=completed_before, cards=cards)[cid]
        if after[cid]["result_seq"] is None:
            assert (later["state"], later["result_seq"]) == (ledger.SUPERSEDED, seq)


def story(
    api: ApiClient, operator: ApiClient, batch: list[dict], later: list[list[dict]], boundary: int, cards: Client | None = None
) -> None:
    """The session's story: rounds of appends, each recovered, answered late, patched and answered late
    again; then forked whole, exported and imported, and forked at `boundary`."""
    session_id = f"calls-{uuid.uuid4().hex}"
    assert api.post("/api/v1/sessions", {"id": session_id}).status_code == 201
    reader = Reader(operator, session_id)
    for number, events in enumerate([batch, *later]):
        note(f"round {number}: {json.dumps(events)[:3000]}")
        if api.post(f"/api/v1/sessions/{session_id}/events", {"events": events}).status_code != 201:
            event("refused")
            if number == 0:
                return  # refused: the read-back property holds what a refusal must do
            break
        round_of(reader, cards)

    quiet(session_id)
    parent_calls = reader.calls()
    parent_events = reader.events()
    # A fork of the whole log, and an import of the export, read as the parent does.
    for copy_id, made in (
        (f"{session_id}-fork", lambda copy_id: operator.post(f"/api/v1/sessions/{session_id}/fork", {"boundary": "last", "id": copy_id})),
        (f"{session_id}-import", lambda copy_id: operator.post(f"/api/v1/sessions/import?id={copy_id}", reader.get("/export"))),
    ):
        ok(made(copy_id), copy_id)
        quiet(copy_id)
        copy = Reader(operator, copy_id, reader.patch_seqs)
        assert same_calls_but_the_session(copy.calls(), parent_calls)
        check(copy, cards=cards)
    # A fork at another boundary reads the parent's calls at its seed point.
    boundary %= max(len(parent_events), 1)
    forked = operator.post(f"/api/v1/sessions/{session_id}/fork", {"boundary": boundary, "id": f"{session_id}-at"})
    if forked.status_code != 201:
        refusal = "open_turn" if parent_events else "boundary_out_of_range"
        assert forked.status_code == 422 and forked.json()["error"] == refusal, forked.content
        event("fork at the boundary refused")
        return
    seed = forked.json()["parent"]["seed_length"]
    event("fork at the boundary made")
    quiet(f"{session_id}-at")
    fork = Reader(operator, f"{session_id}-at", {s for s in reader.patch_seqs if s < seed})
    at_seed = ledger_states(parent_events[:seed], status="clean", patch_seqs=fork.patch_seqs)
    assert [state_fields(c) for c in fork.calls()] == [state_fields(c) for c in at_seed]
    assert [c["call_id"] for c in fork.calls()] == [c["call_id"] for c in parent_calls if c["seq"] < seed]
    check(fork, cards=cards)


# The tests ---------------------------------------------------------------------


@pytest.fixture
def operator(django_user_model) -> ApiClient:
    """An operator of the default project: may recover and patch."""
    return ApiClient(token_for(django_user_model.objects.create_user("operator", is_staff=True), role=Role.OPERATOR))


# A tool's own result marked synthetic before its real one, in an open turn: completed for
# section 8.1, superseded for rule 1 (the one reading the two may differ on).
AGENT_SYNTHETIC_FIRST = [
    {"type": "turn_start", "data": {"turn": 1}},
    {"type": "assistant_message", "data": {"content": "", "tool_calls": [{"id": "c1", "name": "echo"}]}},
    {"type": "tool_result", "data": {"tool_call_id": "c1", "content": "?", "metadata": {"synthetic": True}}},
    {"type": "tool_result", "data": {"tool_call_id": "c1", "content": "done", "metadata": {}}},
]
# A crash owing an outcome-unknown call (dispatched) and a not-started one; a dangling call outside every turn.
CRASH_AND_DANGLING = [
    {"type": "assistant_message", "data": {"content": "", "tool_calls": [{"id": "d1", "name": "send_email"}]}},
    {"type": "turn_start", "data": {"turn": 1}},
    {"type": "step_start", "data": {"turn": 1, "step": 1}},
    {"type": "assistant_message", "data": {"content": "", "tool_calls": [{"id": "c1", "name": "echo"}, {"id": "c2", "name": "echo"}]}},
    {"type": "tool_call", "data": {"id": "c1", "name": "echo"}},
]


@pytest.mark.timeout(600)  # about 30 s alone; four workers per core and a loaded machine took over 240 s
@PROPERTY
@given(batch=random_logs, later=later_batches, boundary=boundaries)
@example(batch=AGENT_SYNTHETIC_FIRST, later=[], boundary=3)
@example(batch=CRASH_AND_DANGLING, later=[], boundary=0)
def test_every_view_of_the_api_states_each_call_as_the_ledger_does(api, operator, batch, later, boundary):
    story(api, operator, batch, later, boundary)


# The cards ---------------------------------------------------------------------


class _CardStates(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.states: dict[str, set[str | None]] = {}

    def handle_starttag(self, tag, attrs):
        found = dict(attrs)
        if "data-call-id" in found and "data-state" in found:
            self.states.setdefault(found["data-call-id"], set()).add(found["data-state"])


def card_states(html: str) -> dict[str, set[str | None]]:
    """Each call id the page's elements carry in `data-call-id` -> every `data-state` shown beside it.

    Only elements carrying both count (links and call blocks may carry data-call-id alone)."""
    parser = _CardStates()
    parser.feed(html)
    parser.close()
    return parser.states


EARLIER = re.compile(r'hx-get="([^"]*\?before=\d+)"')


def check_cards(browser: Client, session_id: str, calls: list[dict]) -> None:
    """Every call of /calls has a card on the session page (or on the earlier turns it loads), and
    every card of it reads its state."""
    response = browser.get(f"/sessions/{session_id}/")
    assert response.status_code == 200, response.status_code
    html = response.content.decode()
    pages = [html]
    while earlier := EARLIER.search(html):
        response = browser.get(unescape(earlier.group(1)))
        assert response.status_code == 200, response.status_code
        html = response.content.decode()
        pages.append(html)
    shown: dict[str, set[str | None]] = {}
    for page in pages:
        for cid, states in card_states(page).items():
            shown.setdefault(cid, set()).update(states)
    for call in calls:
        assert shown.get(call["call_id"]) == {call["state"]}, (call, shown.get(call["call_id"]))


def test_card_states_reads_every_element_marked_with_a_call_id():
    html = '<div data-call-id="c&quot;1" data-state="completed"><span data-call-id="c&quot;1" data-state="error"></span></div><p data-call-id="c2">'
    assert card_states(html) == {'c"1': {"completed", "error"}}


# The card story renders the page (and its earlier turns) at every check: half the examples, and
# more than pytest-timeout's default 120 s (PostgreSQL on a loaded CI machine took longer).
@pytest.mark.timeout(600)
def test_every_card_reads_the_calls_state(api, operator, django_user_model):
    browser = Client()
    reader = django_user_model.objects.create_user("reader")
    member(reader, Role.VIEWER)
    browser.force_login(reader)
    probe = f"probe-{uuid.uuid4().hex}"
    assert api.post("/api/v1/sessions", {"id": probe}).status_code == 201
    assert api.post(f"/api/v1/sessions/{probe}/events", {"events": CRASH_AND_DANGLING}).status_code == 201
    assert card_states(browser.get(f"/sessions/{probe}/").content.decode()), "no card carries data-call-id and data-state"

    @settings(PROPERTY, max_examples=max(1, MAX_EXAMPLES // 2))
    @given(batch=random_logs, later=later_batches, boundary=boundaries)
    @example(batch=AGENT_SYNTHETIC_FIRST, later=[], boundary=3)
    @example(batch=CRASH_AND_DANGLING, later=[], boundary=0)
    @example(batch=[{"type": "tool_call", "data": {"type": "function", "function": {}, "id": 1.0000000748488348e16}}], later=[], boundary=0)
    def cards_agree(batch, later, boundary):
        story(api, operator, batch, later, boundary, cards=browser)

    cards_agree()
