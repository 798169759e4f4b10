"""Forking from the pages: where "Fork here" is offered, the inline form, its errors and the landing."""

import re

import pytest
from django.db import connection
from hypothesis import HealthCheck, given, settings
from django.test.utils import CaptureQueriesContext

from dashboard.live import sessions as live
from dashboard.pages import fork_spots
from sessions_app import selectors, services
from sessions_app.log.events import event_to_wire, validate_batch
from sessions_app.log.recovery import open_turns
from sessions_app.log.structure import place_all
from sessions_app.models import Event, Session
from tests.sessions_app.log.strategies import logs, message
from tests.sessions_app.services.test_forks import CRASHED
from tests.sessions_app.services.test_recovery import store

pytestmark = pytest.mark.django_db

CLEAN = CRASHED[:6]  # turn 1 closed at seq 4; nothing open


def text_of(response) -> str:
    return response.content.decode()


def offered(page: str) -> set[str]:
    """The boundaries a page offers to fork at."""
    return set(re.findall(r'class="button fork-(?:here|whole)" href="/sessions/[^/]+/fork\?boundary=(\d+|last)"', page))


def unavailable(page: str) -> list[str]:
    """Why no fork may end at an event: said in its permalink's description, nothing printed on the line."""
    return re.findall(r'<a class="permalink" href="#seq-\d+" title="(?:Link to this event\. )?No fork here: ([^"]*)"', page)


@pytest.mark.parametrize("view", ["", "?view=raw"])
def test_fork_here_stands_only_where_a_fork_is_allowed_and_elsewhere_says_why(viewer, view):
    store(CRASHED, session_id="p")
    page = text_of(viewer.get(f"/sessions/p/{view}"))
    assert offered(page) == {"0", "4", "5"}  # and not "last": the log ends inside turn 2
    reasons = unavailable(page)
    assert "seq 2 is inside turn 1, which opened at seq 1 and closes at seq 4; a fork must end outside every turn." in reasons
    assert "seq 7 is inside turn 2, opened at seq 6 and still open; recover the session first or pick an earlier boundary." in reasons
    assert not any("never closed" in reason for reason in reasons)
    assert page.count("fork-unavailable") == 1 and "Fork whole session: not now" in page  # the header's, none on the lines


def test_the_whole_session_is_offered_once_no_turn_is_open(viewer):
    store(CLEAN, session_id="clean")
    page = text_of(viewer.get("/sessions/clean/"))
    assert offered(page) == {"0", "4", "5", "last"}
    store(CRASHED, session_id="crashed")
    page = text_of(viewer.get("/sessions/crashed/"))
    assert "Fork whole session: not now" in page and "recover the session first" in page


def test_a_nested_turns_end_is_no_boundary_while_the_turn_around_it_is_open(viewer):
    store([("turn_start", {"turn": 1}), ("turn_start", {"turn": 2}), ("user_message", message("x")),
           ("turn_end", {"turn": 2}), ("turn_end", {"turn": 1}), ("user_message", message("y"))], session_id="nested")  # fmt: skip
    for view in ("", "?view=raw"):
        page = text_of(viewer.get(f"/sessions/nested/{view}"))
        assert offered(page) - {"last"} == {"4", "5"}
        assert "seq 3 is inside turn 1, which opened at seq 0 and closes at seq 4; a fork must end outside every turn." in unavailable(page)


def test_back_to_back_turns_inside_an_open_turn_are_no_boundaries(viewer):
    inner = [("turn_start", {"turn": 2}), ("turn_end", {"turn": 2})] * 6  # each opens right after the last closed
    store([("turn_start", {"turn": 1}), *inner, ("turn_end", {"turn": 1}), ("turn_start", {"turn": 3}), ("turn_end", {"turn": 3})],
          session_id="inner")  # fmt: skip
    page = text_of(viewer.get("/sessions/inner/?view=raw"))
    assert offered(page) == {"13", "15", "last"}
    assert "seq 12 is inside turn 1, which opened at seq 0 and closes at seq 13; a fork must end outside every turn." in unavailable(page)


def test_a_live_frame_renders_the_same_fork_controls(viewer):
    session = store(CRASHED, session_id="p")
    services.append_events(session_id="p", events=validate_batch([
        {"type": "tool_result", "data": {"tool_call_id": "b", "content": "done"}},
        {"type": "turn_end", "data": {"turn": 2, "steps": 0, "reason": "complete"}},
    ]))  # fmt: skip
    wires = [event_to_wire(e) for e in selectors.events_since(session, since=8, limit=2)]
    frame = "".join(live.render_page_frame("p", wires, shown_through=7, can_fork=True))
    assert offered(frame) == {"9", "last"}  # and the whole session, in the header the frame re-renders as a reload
    assert any("closes at seq 9" in reason for reason in unavailable(frame))
    # Frames for those who may not fork carry no fork control at all.
    without = "".join(live.render_page_frame("p", wires, shown_through=7, can_fork=False))
    assert offered(without) == set() and unavailable(without) == [] and "fork" not in without.lower()


def test_validity_costs_the_same_few_queries_however_many_turns_the_page_shows(viewer):
    turn = [("user_message", message("q")), ("turn_start", {"turn": 1}), ("assistant_message", message("a")),
            ("turn_end", {"turn": 1, "steps": 0})]  # fmt: skip
    counts = []
    for turns in (2, 6):
        store(turn * turns, session_id=f"t{turns}")
        with CaptureQueriesContext(connection) as queries:
            viewer.get(f"/sessions/t{turns}/")
        counts.append(len(queries))
    assert counts[0] == counts[1]


def test_the_form_opens_in_place_with_a_readable_unused_name(viewer):
    store(CLEAN, session_id="p")
    form = text_of(viewer.get("/sessions/p/fork?boundary=4", HTTP_HX_REQUEST="true"))
    assert "<html" not in form and 'class="fork-form"' in form
    assert re.search(r'<input id="fork-name-4" name="id" value="p-fork-4" [^>]*required autofocus', form)
    assert "inherits events 0–4 of" in form
    services.fork(session_id="p", boundary=4, new_session_id="p-fork-4")
    assert 'value="p-fork-4-2"' in text_of(viewer.get("/sessions/p/fork?boundary=4", HTTP_HX_REQUEST="true"))
    whole = text_of(viewer.get("/sessions/p/fork?boundary=last"))  # without JS: a page of its own
    assert "<html" in whole and 'value="p-fork-5"' in whole and "(the whole session)" in whole


def test_an_empty_session_forks_to_an_empty_one(viewer):
    services.create_session(session_id="empty")
    form = text_of(viewer.get("/sessions/empty/fork?boundary=last", HTTP_HX_REQUEST="true"))
    assert "A new, empty session forked from <code>empty</code>, which has no events yet." in form and 'value="empty-fork"' in form
    response = viewer.post("/sessions/empty/fork", {"boundary": "last", "id": "empty-fork"})
    assert response.status_code == 302 and "Forked empty (it had no events yet) into this session." in text_of(viewer.get(response.url))


def test_the_suggested_name_of_a_long_id_keeps_to_128_characters(viewer):
    store(CLEAN, session_id="x" * 128)
    form = text_of(viewer.get(f"/sessions/{'x' * 128}/fork?boundary=5", HTTP_HX_REQUEST="true"))
    name = re.search(r'name="id" value="([^"]+)"', form).group(1)
    assert len(name) <= 128 and name.endswith("-fork-5")
    response = viewer.post(f"/sessions/{'x' * 128}/fork", {"boundary": "5", "id": name})
    assert response.status_code == 302 and Session.objects.filter(pk=name, seed_length=6).exists()


def test_a_named_fork_lands_on_its_page_with_a_confirmation(viewer):
    store(CLEAN, session_id="p")
    response = viewer.post("/sessions/p/fork", {"boundary": "4", "id": "p-try-2"})
    assert response.status_code == 302 and response.url == "/sessions/p-try-2/"
    page = text_of(viewer.get(response.url))
    assert re.search(r'<div role="status"><ul class="messages"><li class="success">Forked p at seq 4 into this session: events 0–4 are inherited.</li>', page)
    htmx = viewer.post("/sessions/p/fork", {"boundary": "0", "id": "p-first"}, HTTP_HX_REQUEST="true")
    assert htmx.status_code == 204 and htmx["HX-Redirect"] == "/sessions/p-first/"
    assert "Forked p at seq 0 into this session" in text_of(viewer.get("/sessions/p-first/"))


def test_without_a_name_the_fork_gets_the_readable_default(viewer):
    store(CLEAN, session_id="p")
    assert viewer.post("/sessions/p/fork", {"boundary": "5"}).url == "/sessions/p-fork-5/"


@pytest.mark.parametrize("name", ["has space", "x" * 129, "nul\x00", "slash/y", "é"])
def test_a_bad_name_is_explained_in_the_form_and_nothing_is_stored(viewer, name):
    store(CLEAN, session_id="p")
    response = viewer.post("/sessions/p/fork", {"boundary": "4", "id": name})
    assert response.status_code == 422
    assert "Session ids are 1 to 128 characters" in text_of(response) and 'aria-invalid="true"' in text_of(response)
    htmx = viewer.post("/sessions/p/fork", {"boundary": "4", "id": name}, HTTP_HX_REQUEST="true")
    assert htmx.status_code == 200 and "<html" not in text_of(htmx) and "Session ids are 1 to 128 characters" in text_of(htmx)
    assert Session.objects.count() == 1


def test_a_taken_name_is_explained_in_place_with_a_free_one_suggested(viewer):
    store(CLEAN, session_id="p")
    response = viewer.post("/sessions/p/fork", {"boundary": "4", "id": "p"}, HTTP_HX_REQUEST="true")
    form = text_of(response)
    assert response.status_code == 200 and "A session named p already exists: pick another name." in form
    assert 'value="p-fork-4"' in form and Session.objects.count() == 1


def test_a_boundary_inside_a_closed_turn_says_where_it_closes_and_offers_no_recovery(viewer):
    store(CLEAN, session_id="clean")
    form = text_of(viewer.get("/sessions/clean/fork?boundary=2", HTTP_HX_REQUEST="true"))
    assert "seq 2 is inside turn 1, which opened at seq 1 and closes at seq 4; a fork must end outside every turn." in form
    assert "never closed" not in form and "Recover" not in form and "Create fork" not in form
    assert "?boundary=0" in form and "Fork at seq 0 (before the turn opened)" in form
    assert "?boundary=4" in form and "Fork at seq 4 (where the turn closes)" in form
    response = viewer.post("/sessions/clean/fork", {"boundary": "2", "id": "nope"})
    assert response.status_code == 422 and "closes at seq 4" in text_of(response)
    assert Session.objects.count() == 1


@pytest.mark.parametrize("boundary", ["²", "-1", "", "1.0", "first"])
def test_a_boundary_that_is_no_seq_is_explained_not_a_crash(viewer, boundary):
    store(CLEAN, session_id="p")
    assert "is neither a seq" in text_of(viewer.get("/sessions/p/fork", {"boundary": boundary}))
    response = viewer.post("/sessions/p/fork", {"boundary": boundary, "id": "x"})
    assert response.status_code == 422 and "is neither a seq" in text_of(response) and Session.objects.count() == 1


def test_a_boundary_inside_an_open_turn_offers_recovery(viewer):
    store(CRASHED, session_id="crashed")
    form = text_of(viewer.get("/sessions/crashed/fork?boundary=last", HTTP_HX_REQUEST="true"))
    assert "Cannot fork the whole session:" in form and "opened at seq 6 and still open" in form
    assert "Recover the session first" in form and "Fork at seq 5 (before the turn opened)" in form


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(events=logs())
def test_fork_spots_follow_the_fork_rule_on_any_log(events):
    """Allowed exactly where a fork is (no open turn in the prefix); otherwise the innermost
    turn open there and where it closes, as the refusal would name them."""
    session = store(events)
    placed = {seq: (type_, turn) for seq, type_, turn in Event.objects.filter(session=session).values_list("seq", "type", "turn_seq")}
    spots = fork_spots.fork_spots(session, placed)
    placements = place_all(events)[0]
    for event in events:
        unclosed = open_turns(events[: event.seq + 1])
        spot = spots[event.seq]
        assert spot.allowed == (not unclosed)
        if unclosed:
            closing = [e.seq for e, p in zip(events, placements) if e.type == "turn_end" and p.turn_seq == unclosed[0]]
            assert (spot.turn_seq, spot.closed_at) == (unclosed[0], closing[0] if closing else None)
    starts = {e.seq for e in events if e.type == "turn_start"}
    enclosing = {t: open_turns(events[:t])[0] for t in starts if open_turns(events[:t])}
    # Walking back over closed turns, and reading the later turn_ends, agree.
    assert selectors.enclosing_turns(session, starts) == selectors.enclosing_turns(session, starts, steps=0) == enclosing
