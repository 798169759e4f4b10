"""dashboard.live.frames: a page kept open, each frame applied as htmx applies it, reads as a fresh load.

The page a client loaded is parsed (tests.dom), every frame the page socket would
send for the events appended since is applied to it, and the result is compared
with a reload: the header, the tab bar, the ledger panel and every block present
in both. Frames carry what changed: never a whole open turn, each message under
FRAME_BYTES.
"""

from __future__ import annotations

import itertools

import pytest
from django.contrib.auth import get_user_model
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dashboard.live import frames
from dashboard.pages import notes, transcript
from sessions_app import services
from sessions_app.log.events import event_to_wire, validate_batch
from sessions_app.models import Session
from sessions_app.selectors import access, events_since
from tests import dom

pytestmark = pytest.mark.django_db


class OpenPage:
    """A session page as a browser keeps it: loaded once, then every frame applied."""

    def __init__(self, client, session_id: str):
        self.client, self.session_id = client, session_id
        self.page = dom.parse(self.load())
        cursor = self.page.by_id("live-cursor")
        self.shown_through = int(cursor.attrs["data-last-seq"])
        self.messages: list[str] = []
        # The socket's rights, as the page consumer reads them for its user.
        user = self.client.session.get("_auth_user_id")
        actor = access.Actor(user=get_user_model().objects.get(pk=user))
        self.note_rights = notes.note_rights(actor, Session.objects.get(pk=session_id).project_id)

    def load(self) -> str:
        response = self.client.get(f"/sessions/{self.session_id}/")
        assert response.status_code == 200
        return response.content.decode()

    def follow(self) -> list[str]:
        """The frame for every event appended since, applied; its messages."""
        session = Session.objects.get(pk=self.session_id)
        wires = [event_to_wire(e) for e in events_since(session, since=self.shown_through + 1)]
        if not wires:
            return []
        messages = frames.render_page_frame(self.session_id, wires, self.shown_through, True, note_rights=self.note_rights)
        for message in messages:
            assert dom.apply(self.page, message) == [], message[:300]
            dom.arrange_ledger(self.page, lambda url: self.client.get(url).content.decode())
        self.shown_through = wires[-1]["seq"]
        self.messages += messages
        return messages

    def assert_reads_as_a_reload(self) -> None:
        fresh = dom.parse(self.load())
        for element_id in ("session-head", "session-tabs", "ledger-panel"):
            kept_html, fresh_html = dom.normalized(self.page.by_id(element_id)), dom.normalized(fresh.by_id(element_id))
            assert kept_html == fresh_html, dom.difference(kept_html, fresh_html)
        kept = {n.attrs["id"]: n for n in self.page.by_id("blocks").elements()}
        for block in fresh.by_id("blocks").elements():
            if block.attrs["id"] in kept:
                kept_html, fresh_html = dom.normalized(kept[block.attrs["id"]]), dom.normalized(block)
                assert kept_html == fresh_html, dom.difference(kept_html, fresh_html)


def append(session_id: str, *events: tuple[str, dict]) -> None:
    services.append_events(session_id=session_id, events=validate_batch([{"type": t, "data": d} for t, d in events]))


def call(cid: str, name: str = "lookup") -> dict:
    return {"content": "", "tool_calls": [{"id": cid, "name": name, "arguments": {"q": cid}}]}


def tool_step(n: int, *, answered: bool = True) -> list[tuple[str, dict]]:
    cid = f"c{n}"
    events = [("step_start", {"step": n}), ("assistant_message", call(cid)), ("tool_call", {"id": cid, "name": "lookup"})]
    if answered:
        events.append(("tool_result", {"tool_call_id": cid, "content": f"answer {n}"}))
    return [*events, ("step_end", {"step": n, "outcome": "ok"})]


@pytest.fixture
def session_id():
    services.create_session(session_id="long")
    append("long", ("user_message", {"content": "go"}), ("turn_start", {"turn": 1}))
    return "long"


def test_a_long_open_turn_followed_event_by_event_reads_as_a_reload(viewer, session_id):
    page = OpenPage(viewer, session_id)
    for n in range(40):  # 200 events: past the three pages a turn shows whole
        for event in tool_step(n):
            append(session_id, event)
            messages = page.follow()
            assert all(len(m.encode()) <= frames.FRAME_BYTES for m in messages)
            assert "<section id=\"turn-1\"" not in "".join(messages)  # never the whole turn again
        page.assert_reads_as_a_reload()


def test_a_long_turn_shows_its_first_page_and_its_last_two(viewer, session_id):
    append(session_id, *[e for n in range(200) for e in tool_step(n)])
    page = dom.parse(OpenPage(viewer, session_id).load())
    turn = page.by_id("turn-1")
    pages = [n for n in turn.walk() if n.tag == "div" and n.attrs.get("class") in ("turn-page", "page-stub")]
    shown = [n.attrs["id"] for n in pages if n.attrs["class"] == "turn-page"]
    count = (1 + 1 + 200 * 5 - 1) // transcript.TURN_PAGE + 1
    assert shown == ["page-1-0", f"page-1-{count - 2}", f"page-1-{count - 1}"]
    assert len(pages) == count


def test_a_batch_that_fills_many_pages_arrives_in_small_messages(viewer, session_id):
    page = OpenPage(viewer, session_id)
    append(session_id, *[e for n in range(300) for e in tool_step(n)])
    messages = page.follow()
    assert len(messages) > 1 and all(len(m.encode()) <= frames.FRAME_BYTES for m in messages)
    page.assert_reads_as_a_reload()


def test_closing_a_long_turn_re_reads_it_whole_in_small_messages(viewer, session_id):
    append(session_id, *[e for n in range(100) for e in tool_step(n)])
    page = OpenPage(viewer, session_id)
    append(session_id, ("turn_end", {"turn": 1, "reason": "complete"}))
    messages = page.follow()
    assert all(len(m.encode()) <= frames.FRAME_BYTES for m in messages)
    page.assert_reads_as_a_reload()


def test_a_value_of_a_million_characters_arrives_as_its_preview_and_a_link_to_the_whole(viewer, session_id):
    page = OpenPage(viewer, session_id)
    value = "word " * 220_000  # 1,100,000 characters
    append(session_id, ("user_message", {"content": value}), *tool_step(1))
    messages = page.follow()
    assert all(len(m.encode()) <= frames.FRAME_BYTES for m in messages)
    assert "show all (1100000 characters)" in "".join(messages) and value not in "".join(messages)
    page.assert_reads_as_a_reload()
    assert "show all (1100000 characters)" in page.load()


def test_a_late_result_re_renders_its_card_only(viewer, session_id):
    append(session_id, *tool_step(1, answered=False))
    page = OpenPage(viewer, session_id)
    append(session_id, ("tool_result", {"tool_call_id": "c1", "content": "finally"}))
    [message] = page.follow()
    assert 'data-call-id="c1" data-state="completed" hx-swap-oob="true"' in message
    page.assert_reads_as_a_reload()


COUNTER = itertools.count()
EVENTS = st.sampled_from(["step", "open step", "close step", "message", "call", "dispatch", "result", "turn", "user"])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(st.lists(EVENTS, min_size=1, max_size=60), min_size=1, max_size=8))
def test_any_appends_in_any_batches_read_as_a_reload(viewer, batches):
    """Random turns, steps, calls and results, appended in random batches: after each frame, the page is a reload."""
    sid = f"prop-{next(COUNTER)}"
    services.create_session(session_id=sid)
    page = OpenPage(viewer, sid)
    state = {"turn": 0, "open": False, "steps": [], "calls": [], "n": 0}
    for batch in batches:
        events = []
        for kind in batch:
            events += choose(kind, state)
        if events:
            append(sid, *events)
            messages = page.follow()
            assert all(len(m.encode()) <= frames.FRAME_BYTES for m in messages)
            page.assert_reads_as_a_reload()


def choose(kind: str, state: dict) -> list[tuple[str, dict]]:
    state["n"] += 1
    n = state["n"]
    if kind == "turn":
        if state["open"]:
            state["open"], state["steps"] = False, []
            return [("turn_end", {"turn": state["turn"], "reason": "complete"})]
        state["turn"] += 1
        state["open"] = True
        return [("turn_start", {"turn": state["turn"]})]
    if kind in ("step", "open step"):
        state["steps"].append(n)
        return [("step_start", {"step": n})] + ([] if kind == "open step" else [])
    if kind == "close step":
        if state["steps"]:
            return [("step_end", {"step": state["steps"].pop(), "outcome": "ok"})]
        return []
    if kind == "call":
        state["calls"].append(f"c{n}")
        return [("assistant_message", call(f"c{n}"))]
    if kind == "dispatch":
        if state["calls"]:
            cid = state["calls"][-1]
            return [("tool_call", {"id": cid, "name": "lookup"})]
        return []
    if kind == "result":
        if state["calls"]:
            cid = state["calls"].pop(0)
            return [("tool_result", {"tool_call_id": cid, "content": f"result of {cid}"})]
        return []
    if kind == "user":
        return [("user_message", {"content": f"message {n}"})]
    return [("assistant_message", {"content": f"thinking {n}"})]



def test_a_note_on_a_result_outside_its_calls_turn_reaches_the_card_and_the_results_row(viewer):
    """A result written after its call's turn closed stands as a row of its own and shows on the card too: a note
    pinned to it shows in both places, live as on a reload."""
    services.create_session(session_id="late")
    append("late", ("turn_start", {"turn": 1}), ("assistant_message", call("c1")), ("tool_call", {"id": "c1", "name": "lookup"}))
    append("late", ("turn_end", {"turn": 1, "reason": "complete"}), ("tool_result", {"tool_call_id": "c1", "content": "late"}))
    page = OpenPage(viewer, "late")
    user = get_user_model().objects.get(pk=viewer.session["_auth_user_id"])
    services.add_note(actor=access.Actor(user=user), session_id="late", text="seen late", seq=4)
    for message in frames.render_notes_frame("late", [4], True, True, False, page.note_rights):
        assert dom.apply(page.page, message) == [], message[:300]
        dom.arrange_ledger(page.page, lambda url: viewer.get(url).content.decode())
    assert "seen late" in dom.normalized(page.page.by_id("event-4"))
    page.assert_reads_as_a_reload()


def test_an_inferred_dispatch_arriving_live_says_so_on_its_card_as_a_reload_does(viewer, session_id):
    append(session_id, ("step_start", {"step": 1}), ("assistant_message", call("c1")))
    page = OpenPage(viewer, session_id)
    append(session_id, ("tool_call", {"id": "c1", "name": "lookup", "metadata": {"inferred": True}}))
    messages = page.follow()
    assert "Inferred from the model's request" in "".join(messages) and "Dispatched (tool_call)" not in "".join(messages)
    card = dom.normalized(next(n for n in page.page.walk() if n.attrs.get("data-call-id") == "c1"))
    assert "dispatch inferred" in card and "no span of the tool was seen, so whether it ran is unknown" in card
    page.assert_reads_as_a_reload()


def test_a_turn_recovered_while_the_page_is_open_says_when_it_was_last_heard_from(viewer, session_id, django_user_model):
    append(session_id, *tool_step(1, answered=False)[:-1])
    page = OpenPage(viewer, session_id)
    services.recover(session_id=session_id, user=django_user_model.objects.create_user("ops", is_staff=True))
    page.follow()
    head = dom.normalized(next(n for n in page.page.by_id("turn-1").walk() if n.tag == "header"))
    assert "into the turn; what ran after that is unknown · recovered" in head and "interrupted after" not in head
    page.assert_reads_as_a_reload()
