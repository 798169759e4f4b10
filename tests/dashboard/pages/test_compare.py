"""The comparison page: a fork against its parent (or any readable session), its refusals, links and escaping."""

import html
import re

import pytest

from sessions_app import selectors, services
from sessions_app.log.events import validate_batch
from sessions_app.models import Project
from sessions_app.selectors import compare as comparing
from tests.sessions_app.log.strategies import message
from tests.sessions_app.services.test_forks import CRASHED
from tests.sessions_app.services.test_recovery import store

pytestmark = pytest.mark.django_db

CLEAN = CRASHED[:6]  # turn 1 closed at seq 4, a user message at seq 5: a fork at 5 inherits 0-5


def charge(turn: int, answer: str, *, tool: str = "charge_card", arguments=None) -> list[dict]:
    """A turn that calls `tool` and gets `answer` back."""
    call = {"id": f"call_{turn}", "name": tool, "arguments": arguments if arguments is not None else {"order": 42}}
    return [
        {"type": "turn_start", "data": {"turn": turn}},
        {"type": "assistant_message", "data": message("", tool_calls=[call])},
        {"type": "tool_call", "data": call},
        {"type": "tool_result", "data": message(answer, tool_call_id=call["id"], name=tool)},
        {"type": "turn_end", "data": {"turn": turn, "reason": "complete"}},
    ]


def append(session_id: str, events: list[dict]) -> None:
    services.append_events(session_id=session_id, events=validate_batch(events))


def fork_and_diverge(parent_events=CLEAN, *, parent="p", fork="f", boundary=5):
    store(parent_events, session_id=parent)
    services.fork(session_id=parent, boundary=boundary, new_session_id=fork)
    append(parent, charge(2, "charged ch_1"))
    append(fork, [{"type": "user_message", "data": message("try again")}, *charge(2, "charged ch_2")])


def text(response) -> str:
    return response.content.decode()


def plain(page: str) -> str:
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page)))


def test_a_forks_comparison_collapses_the_prefix_marks_the_first_difference_and_flags_a_call_made_in_both(viewer):
    fork_and_diverge()
    response = viewer.get("/sessions/f/compare")
    assert response.status_code == 200
    page = text(response)
    assert "Events 0–5 are the same in both." in plain(page)
    assert "Known from the fork: they were inherited, not read." in plain(page)
    marked = re.findall(r'<td class="seq"><a href="/sessions/(\w)/events/(\d+).json">\d+</a></td>\s*<td class="event"><code class="type">\w+</code> '
                        r'<span class="badge danger first-mark">first difference</span>', page)
    assert marked == [("f", "6"), ("p", "6")]  # each side's seq 6; the fork's "try again" stands opposite nothing
    anchored = re.search(r'<tr class="differs first-difference" id="first-difference">(.*?)</tr>', page, re.S).group(1)
    assert "/sessions/f/events/6.json" in anchored
    assert "First difference at seq 6 : the parent has turn_start , the fork has user_message ." in plain(page)
    assert page.count('id="first-difference"') == 1
    repeated = re.findall(r'<tr class="effect repeated">(.*?)</tr>', page, re.S)
    assert len(repeated) == 1 and "charge_card ran in the parent and again in the fork" in repeated[0]
    assert "1 call happened in both." in plain(page)


def test_the_turns_of_each_continuation_stand_side_by_side(viewer):
    fork_and_diverge()
    page = text(viewer.get("/sessions/f/compare"))
    heads = re.findall(r'<tr class="compare-turn"><th scope="colgroup" colspan="2">([^<]*)</th><th scope="colgroup" colspan="2">([^<]*)</th>', page)
    assert heads == [("turn 2", "turn 2")]  # the fork's "try again" goes with the turn it asked for


def test_a_call_only_one_side_made_is_not_flagged(viewer):
    store(CLEAN, session_id="p")
    services.fork(session_id="p", boundary=5, new_session_id="f")
    append("p", charge(2, "charged"))
    append("f", charge(2, "refunded", tool="refund", arguments={"order": 42}))
    page = text(viewer.get("/sessions/f/compare"))
    assert 'class="effect repeated"' not in page and '<span class="badge danger">in both</span>' not in page
    assert page.count('<tr class="effect">') == 2


def test_the_comparison_reads_only_the_continuations_of_a_fork(viewer, monkeypatch):
    long_parent = [("user_message", message(f"question {n}")) for n in range(300)]
    fork_and_diverge(long_parent, boundary=299)
    asked = []
    real = comparing.events_since
    monkeypatch.setattr(comparing, "events_since", lambda session, *, since, limit: asked.append(since) or real(session, since=since, limit=limit))
    found = selectors.compare_sessions(selectors.get_session("p"), selectors.get_session("f"))
    assert found.prefix == 300 and found.inherited == 300
    assert asked and min(asked) == 300  # nothing below the fork's seed was read


def test_two_unrelated_sessions_are_compared_chunk_by_chunk_and_a_cap_is_said(viewer, monkeypatch):
    same = [("user_message", message(f"line {n}")) for n in range(7)]
    store([*same, ("user_message", message("a"))], session_id="one")
    store([*same, ("user_message", message("b"))], session_id="two")
    monkeypatch.setattr(comparing, "CHUNK", 2)
    page = plain(text(viewer.get("/sessions/two/compare?with=one")))
    assert "Events 0–6 are the same in both. Compared event by event." in page
    assert "First difference at seq 7" in page
    monkeypatch.setattr(comparing, "SCAN_LIMIT", 3)
    page = plain(text(viewer.get("/sessions/two/compare?with=one")))
    assert "Events 0–2 are the same in both." in page
    assert "Compared no further than 3 events past the start: the logs may agree for longer." in page
    assert "First difference" not in page


def test_two_forks_of_one_parent_share_what_both_inherited(viewer):
    store(CLEAN, session_id="p")
    services.fork(session_id="p", boundary=4, new_session_id="early")
    services.fork(session_id="p", boundary=5, new_session_id="late")
    append("early", charge(2, "x"))
    append("late", charge(2, "x"))
    found = selectors.compare_sessions(selectors.get_session("early"), selectors.get_session("late"))
    assert found.inherited == 5 and found.prefix == 5
    assert found.comparison.first_left.type == "turn_start" and found.comparison.first_right.seq == 5
    assert found.left.name == "early" and found.right.name == "late"
    # late holds p's seq 5 as inherited: its calls from there on are listed all the same
    assert [row.right.tool for row in found.comparison.effects if row.right] == ["charge_card"]


def test_identical_logs_say_so(viewer):
    store(CLEAN, session_id="p")
    services.fork(session_id="p", boundary="last", new_session_id="f")
    page = plain(text(viewer.get("/sessions/f/compare")))
    assert "Events 0–5 are the same in both." in page and "The two logs are the same" in page


def test_a_session_with_no_parent_offers_the_form_alone(viewer):
    store(CLEAN, session_id="solo")
    response = viewer.get("/sessions/solo/compare")
    assert response.status_code == 200
    assert "This session is no fork" in text(response) and 'name="with"' in text(response)


@pytest.mark.parametrize(
    "with_, status, says",
    [
        ("no such", 400, "?with= must be a session id"),
        ("f", 400, "?with= names this session itself"),
        ("missing", 404, "?with=: there is no session 'missing' you can read"),
        ("theirs", 404, "?with=: there is no session 'theirs' you can read"),
    ],
    ids=["not an id", "itself", "no such session", "another project's"],
)
def test_a_bad_with_answers_the_styled_page_saying_what_was_wrong(viewer, with_, status, says):
    fork_and_diverge()
    team = Project.objects.create(slug="team", name="The Team")
    services.create_session(session_id="theirs", project=team)
    response = viewer.get("/sessions/f/compare", {"with": with_})
    assert response.status_code == status
    page = text(response)
    assert '<p class="alert danger compare-refusal" role="alert">' in page and html.escape(says) in page
    assert "<h1>Compare" in page and "Side effects" not in page


def test_a_session_the_user_cannot_read_is_not_found(viewer):
    team = Project.objects.create(slug="team", name="The Team")
    services.create_session(session_id="theirs", project=team)
    store(CLEAN, session_id="mine")
    assert viewer.get("/sessions/theirs/compare?with=mine").status_code == 404


def test_hostile_tool_names_and_arguments_are_escaped(viewer):
    hostile = "<script>alert(1)</script>"
    store(CLEAN, session_id="p")
    services.fork(session_id="p", boundary=5, new_session_id="f")
    for session_id in ("p", "f"):
        append(session_id, charge(2, f"{hostile} done in {session_id}", tool=hostile, arguments={"x": '<img src=x onerror="alert(2)">'}))
    page = text(viewer.get("/sessions/f/compare"))
    assert "<script>alert(1)" not in page and "<img src=x" not in page
    assert html.escape(hostile) in page
    assert f"{hostile} ran in the parent and again in the fork" in plain(page)


def test_the_lineage_page_and_a_forks_header_link_to_the_comparison(viewer):
    fork_and_diverge()
    services.fork(session_id="f", boundary="last", new_session_id="ff")
    lineage = text(viewer.get("/sessions/p/lineage"))
    assert '<a class="compare-link" href="/sessions/f/compare">Compare with parent</a>' in lineage
    assert '<a class="compare-link" href="/sessions/ff/compare">Compare with parent</a>' in lineage
    assert 'href="/sessions/p/compare"' not in lineage  # no parent, nothing to compare with by default
    assert 'href="/sessions/f/compare"' in text(viewer.get("/sessions/f/"))
    assert "/compare" not in text(viewer.get("/sessions/p/"))
