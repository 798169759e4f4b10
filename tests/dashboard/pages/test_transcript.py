"""dashboard.pages.transcript's tool cards read their state from the ledger (log.ledger), as /calls does.

Each test is a way the cards used to read otherwise than api.md's rules; every page's cards are
compared, call by call, with selectors.session_calls (the rows of GET /api/v1/sessions/{id}/calls).
"""

import io
import re
from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.utils.html import escape
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dashboard.pages import transcript

from sessions_app import selectors, services
from sessions_app.log import recovery
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


# A call known only from a model span's request (the OTLP mapping writes its tool_call with metadata.inferred) ------------

INFERRED = [
    ("user_message", message("go")),
    ("turn_start", {"turn": 1}),
    ("step_start", {"turn": 1, "step": 1}),
    assistant("c1"),  # the model span's request
    ("tool_call", {"id": "c1", "name": "echo", "metadata": {"inferred": True}}),  # no span of the tool was seen
]


def card_html(page: str, cid: str) -> str:
    """The card's own HTML: up to its notes form (every member may add a note)."""
    start = page.index(f'data-call-id="{cid}" data-state=')
    return page[start : page.index('class="add-note"', start)]


def test_a_call_inferred_from_the_models_request_says_so_on_its_card_the_recovery_page_and_the_cli(operator):
    store(INFERRED, session_id="otel")  # January: stalled with turn 1 open, c1 owed under rule 1
    card = card_html(page_of(operator, "otel"), "c1")
    assert "Inferred from the model's request (a tool_call with <code>metadata.inferred</code>) at" in card
    assert "no span of the tool was seen, so whether it ran is unknown" in card
    assert "Why (rule 1): " + escape(recovery.INFERRED_REASON) in card
    assert "Dispatched (tool_call)" not in card and "handed to the executor" not in card
    # The reason says why it is still owed as an unknown outcome.
    assert "it may have run" in recovery.INFERRED_REASON and "no evidence that the tool did not run" in recovery.INFERRED_REASON

    preview = operator.get("/sessions/otel/recovery").content.decode()
    assert "Why (rule 1): " + escape(recovery.INFERRED_REASON) in preview
    assert "tool_call inferred from the model&#x27;s request" in preview and "handed to the executor" not in preview

    out = io.StringIO()
    call_command("sessions", "status", "otel", stdout=out)
    assert f"Why (rule 1): {recovery.INFERRED_REASON}" in out.getvalue() and "handed to the executor" not in out.getvalue()


def test_a_call_the_agent_dispatched_itself_still_reads_handed_to_the_executor(operator):
    store([*INFERRED[:-1], dispatch("c1")], session_id="sdk")
    card = card_html(page_of(operator, "sdk"), "c1")
    assert "Dispatched (tool_call) at" in card and "Why (rule 1): " + escape(recovery.RULE_REASONS[1]) in card
    assert "Inferred" not in card


def test_a_pending_inferred_call_reads_dispatch_inferred(operator):
    services.create_session(session_id="live")
    events = validate_batch([{"type": t, "data": d} for t, d in INFERRED])  # timed now: the session is running
    services.append_events(session_id="live", events=events)
    card = card_html(page_of(operator, "live"), "c1")
    assert 'data-state="pending"' in page_of(operator, "live")
    assert '<span class="muted pending-detail">dispatch inferred</span>' in card


# A recovered turn's header: when the agent was last heard from, not how long "it ran" ---------------------------------


def test_a_recovered_turns_header_says_when_it_was_last_heard_from_not_that_it_was_interrupted_after(operator):
    """The tool ran for seconds, but the log last heard from the turn 18 ms in: the header says only what it knows."""
    at = datetime(2026, 1, 5, 10, 0, tzinfo=UTC)
    timed = [(INFERRED[0], at), (INFERRED[1], at), (INFERRED[2], at + timedelta(milliseconds=5)),
             (INFERRED[3], at + timedelta(milliseconds=12)), (dispatch("c1"), at + timedelta(milliseconds=18))]  # fmt: skip
    services.create_session(session_id="crashed")
    wire = [{"type": t, "data": d, "time": when.isoformat().replace("+00:00", "Z")} for (t, d), when in timed]
    services.append_events(session_id="crashed", events=validate_batch(wire), received_at=at + timedelta(milliseconds=18))
    services.recover(session_id="crashed", user=get_user_model().objects.get(username="ops"))

    page = page_of(operator, "crashed")
    head = page[page.index('<header class="turn-head"') :].split("</header>")[0]
    assert re.search(r"last heard from 18 ms into the turn; what ran after that is unknown · recovered \d+ d \d+ h later", head)
    assert "nterrupted after" not in head
