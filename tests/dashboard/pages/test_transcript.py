"""dashboard.pages.transcript's tool cards read their state from the ledger (log.ledger), as /calls does.

Each test is a way the cards used to read otherwise than api.md's rules; every page's cards are
compared, call by call, with selectors.session_calls (the rows of GET /api/v1/sessions/{id}/calls).
"""

import re

import pytest
from django.contrib.auth import get_user_model
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dashboard.pages import transcript

from sessions_app import selectors, services
from sessions_app.log.events import validate_batch
from sessions_app.models import Session
from tests.sessions_app.log.strategies import logs, message
from tests.sessions_app.log.test_recovery import WORKED_EXAMPLE, assistant, dispatch, result
from tests.sessions_app.services.test_recovery import store

pytestmark = pytest.mark.django_db

CARD = re.compile(r'<div class="card state-[^"]*" id="(?P<anchor>[^"]+)" data-call-id="(?P<cid>[^"]*)" data-state="(?P<state>[^"]+)"')


def cards(page: str) -> list[tuple[str, str]]:
    """(call id, data-state) of every card on the page, in page order."""
    return [(m["cid"], m["state"]) for m in CARD.finditer(page)]


def ledger(session_id: str) -> dict[str, str]:
    return {row.call.call_id: row.call.state for row in selectors.session_calls(Session.objects.get(pk=session_id), all_classes=True)}


def page_of(client, session_id: str) -> str:
    response = client.get(f"/sessions/{session_id}/")
    assert response.status_code == 200
    return response.content.decode()


def assert_cards_read_the_ledger(client, session_id: str) -> list[tuple[str, str]]:
    shown = cards(page_of(client, session_id))
    assert len({cid for cid, _ in shown}) == len(shown), f"a call has two cards: {shown}"
    assert dict(shown) == ledger(session_id)
    return shown


def closed(*items):
    return [("turn_start", {"turn": 1}), *items, ("turn_end", {"turn": 1, "reason": "done"})]


def synthetic_result(cid: str, risk: str) -> tuple[str, dict]:
    return ("tool_result", message("stand-in", tool_call_id=cid, name="echo", metadata={"synthetic": True, "risk": risk}))


def test_a_dangling_call_patch_reads_no_result_not_completed(viewer):
    store(closed(assistant("c1")), session_id="s")
    services.patch_dangling_calls(session_id="s", user=get_user_model().objects.get(username="viewer"))
    assert assert_cards_read_the_ledger(viewer, "s") == [("c1", "no_result")]


def test_a_second_synthetic_result_is_not_read_as_real(viewer):
    store(closed(assistant("c1"), synthetic_result("c1", "tool_not_started"), synthetic_result("c1", "tool_outcome_unknown")), session_id="s")
    assert assert_cards_read_the_ledger(viewer, "s") == [("c1", "tool_not_started")]


def test_a_synthetic_result_after_the_real_one_supersedes_nothing(viewer):
    store(closed(assistant("c1"), result("c1"), synthetic_result("c1", "tool_outcome_unknown")), session_id="s")
    assert assert_cards_read_the_ledger(viewer, "s") == [("c1", "completed")]


@pytest.mark.parametrize(("is_error", "state"), [(1, "completed"), (0, "completed"), ("false", "error"), ([], "completed"), ({"x": 1}, "error")])
def test_is_error_is_read_to_the_letter(viewer, is_error, state):
    failed = ("tool_result", message("boom", tool_call_id="c1", name="echo", metadata={"is_error": is_error}))
    store(closed(assistant("c1"), failed), session_id="s")
    assert assert_cards_read_the_ledger(viewer, "s") == [("c1", state)]


def test_a_call_known_only_from_its_tool_call_event_has_a_card(viewer):
    store(closed(dispatch("c9"), result("c9")), session_id="s")
    page = page_of(viewer, "s")
    assert assert_cards_read_the_ledger(viewer, "s") == [("c9", "completed")]
    assert '<span class="tool-name">echo</span>' in page


def test_a_card_stands_at_the_calls_first_sighting_once(viewer):
    # Dispatched before the message that names it, and named again later: one card, at seq 1.
    store(closed(dispatch("c1"), assistant("c1"), result("c1"), assistant("c1")), session_id="s")
    page = page_of(viewer, "s")
    assert assert_cards_read_the_ledger(viewer, "s") == [("c1", "completed")]
    first = page.index('<article id="seq-1"')
    assert first < page.index('data-call-id="c1"') < page.index('<article id="seq-2"')


def test_the_worked_examples_cards_use_the_api_words(viewer):
    store(WORKED_EXAMPLE, session_id="crashed")  # stalled since January
    assert assert_cards_read_the_ledger(viewer, "crashed") == [
        ("c1", "completed"), ("c2", "tool_not_started"), ("c3", "tool_outcome_unknown"),
    ]  # fmt: skip
    services.recover(session_id="crashed", user=get_user_model().objects.get(username="viewer"))
    services.append_events(session_id="crashed", events=validate_batch([{"type": "tool_result", "data": result("c3")[1]}]))
    assert dict(assert_cards_read_the_ledger(viewer, "crashed"))["c3"] == "superseded"


def test_a_card_has_an_anchor_the_ledger_links_to(viewer):
    store(closed(assistant("c1"), result("c1")), session_id="s")
    page = page_of(viewer, "s")
    anchor = CARD.search(page)["anchor"]
    assert page.count(f'id="{anchor}"') == 1 and anchor.startswith("call-")


# The property: for random logs, every card's state is the ledger's -----------------------------


def card_states(session_id: str) -> dict[str, str]:
    """Every card of the whole transcript (all its blocks, not only the first page's)."""
    session = selectors.session_for_page(session_id)
    built = transcript.Builder(session).build(*selectors.placed_events_from(session, 0))
    shown = [card for block in built for row in rows_of(block) for card in row.cards]
    assert len({card.id for card in shown}) == len(shown)
    return {card.id: card.state for card in shown}


def rows_of(block):
    """Every row the builder placed, on every page of a turn (shown or not)."""
    parts = [*block.parts, *(part for page in block.pages for part in page.parts)]
    return [row for part in parts for row in (part.rows if hasattr(part, "rows") else [part])]


def same_story(session_id: str) -> None:
    assert card_states(session_id) == ledger(session_id)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(events=logs(), late=st.booleans())
def test_cards_read_as_the_ledger_before_and_after_recovery_a_patch_a_late_result_and_a_fork(events, late):
    operator = get_user_model().objects.get_or_create(username="prop-ops", is_staff=True)[0]
    session = store(events)
    same_story(session.id)
    owed = [r.call.id for r in selectors.recovery_plan(session).repairs if r.call is not None]
    services.recover(session_id=session.id, user=operator)
    same_story(session.id)
    if late and owed:
        services.append_events(session_id=session.id, events=validate_batch([{"type": "tool_result", "data": result(owed[0])[1]}]))
        same_story(session.id)
    services.patch_dangling_calls(session_id=session.id, user=operator)
    same_story(session.id)
    child = services.fork(session_id=session.id)
    same_story(child.id)
