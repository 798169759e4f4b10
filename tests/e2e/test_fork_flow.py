"""Forking as a person does it, in a real Chromium against a real Daphne: low on a long page,
the form, its errors and the reasons a fork cannot end somewhere show where the person is."""

import re

import pytest
from playwright.sync_api import expect

from sessions_app import services
from sessions_app.models import Session
from tests.e2e.conftest import open_page
from tests.sessions_app.log.test_recovery import WORKED_EXAMPLE
from tests.sessions_app.services.test_recovery import store

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

LIVE = 15_000  # ms: a round trip to the server must arrive well within this
VIEWPORT_HEIGHT = 900  # open_page's viewport
TURNS = 8
# Each turn: user message (4k), turn_start (4k+1), assistant (4k+2), turn_end (4k+3).
LONG_SESSION = [
    event
    for turn in range(1, TURNS + 1)
    for event in [
        ("user_message", {"content": f"question {turn}\n" + "a line of the question\n" * 12}),
        ("turn_start", {"turn": turn}),
        ("assistant_message", {"content": f"answer {turn}\n" + "a line of the answer\n" * 30}),
        ("turn_end", {"turn": turn, "steps": 0, "reason": "complete"}),
    ]
]
LAST_TURN_END = 4 * TURNS - 1


def in_viewport(page, locator) -> dict:
    """The locator's box, asserted to lie wholly inside the visible part of the page."""
    box = locator.bounding_box()
    assert box is not None
    assert 0 <= box["y"] and box["y"] + box["height"] <= VIEWPORT_HEIGHT, (box, page.evaluate("window.scrollY"))
    return box


def test_fork_low_on_a_long_page_with_a_name_lands_on_the_fork_with_a_confirmation(browser, server, plain_user):
    store(LONG_SESSION, session_id="long")
    page = open_page(browser, server, plain_user, "/sessions/long/")
    assert page.evaluate("document.documentElement.scrollHeight") > 4 * VIEWPORT_HEIGHT  # a long page
    control = page.locator(f"#seq-{LAST_TURN_END} .fork-here")
    control.scroll_into_view_if_needed()
    assert page.evaluate("window.scrollY") > 2 * VIEWPORT_HEIGHT  # far down
    page.locator(f"#seq-{LAST_TURN_END}").hover()  # "Fork here" shows on its line's hover
    control.click()
    form = page.locator(f"#seq-{LAST_TURN_END} .fork-form")
    expect(form).to_be_visible(timeout=LIVE)
    form_box, control_box = in_viewport(page, form), control.bounding_box()
    assert abs(form_box["y"] - (control_box["y"] + control_box["height"])) < 40  # right under the control
    name = form.get_by_label("Name of the new session")
    expect(name).to_be_focused()
    expect(name).to_have_value(f"long-fork-{LAST_TURN_END}")
    name.fill("long-second-try")
    form.get_by_role("button", name="Create fork").click()
    page.wait_for_url(f"{server.url}/sessions/long-second-try/", timeout=LIVE)
    expect(page.locator(".messages")).to_contain_text(
        f"Forked long at seq {LAST_TURN_END} into this session: events 0–{LAST_TURN_END} are inherited."
    )
    expect(page.locator(".provenance")).to_contain_text(f"Forked from long at seq {LAST_TURN_END}")
    child = Session.objects.get(pk="long-second-try")
    assert (child.parent_id, child.seed_length) == ("long", 4 * TURNS)


def test_a_taken_name_is_explained_in_the_form_where_the_person_is(browser, server, plain_user):
    store(LONG_SESSION, session_id="long")
    services.create_session(session_id="taken")
    page = open_page(browser, server, plain_user, "/sessions/long/")
    control = page.locator(f"#seq-{LAST_TURN_END - 4} .fork-here")
    control.focus()  # the keyboard's way: "Fork here" shows on focus
    control.press("Enter")
    form = page.locator(".fork-form")
    form.get_by_label("Name of the new session").fill("taken")
    # A slow settle: the Escape below comes before htmx's own autofocus, as it did in a loaded CI run.
    page.evaluate("htmx.config.defaultSettleDelay = 2000")
    form.get_by_role("button", name="Create fork").click()
    error = page.locator(".fork-form .error")
    expect(error).to_have_text("A session named taken already exists: pick another name.", timeout=LIVE)
    in_viewport(page, error)
    assert page.url == f"{server.url}/sessions/long/" and not Session.objects.filter(parent_id="long").exists()
    page.keyboard.press("Escape")  # closes the form and gives focus back to its control
    expect(page.locator(".fork-form")).to_have_count(0)
    expect(control).to_be_focused()


def test_where_a_fork_cannot_end_nothing_is_printed_and_the_permalink_says_why(browser, server, plain_user):
    store(LONG_SESSION, session_id="long")
    page = open_page(browser, server, plain_user, "/sessions/long/")
    inside = LAST_TURN_END - 1  # the last assistant message, inside its turn
    expect(page.locator(f"#seq-{inside} .fork-here")).to_have_count(0)
    expect(page.locator(f"#seq-{inside} .fork-unavailable")).to_have_count(0)
    expect(page.locator(f"#seq-{inside} .permalink")).to_have_attribute(
        "title",
        f"Link to this event. No fork here: seq {inside} is inside turn {TURNS}, which opened at seq {inside - 1}"
        f" and closes at seq {LAST_TURN_END}; a fork must end outside every turn.",
    )


def test_in_a_crashed_session_the_open_turn_says_recover_and_an_earlier_boundary_forks(browser, server, plain_user):
    store(WORKED_EXAMPLE, session_id="crashed")
    page = open_page(browser, server, plain_user, "/sessions/crashed/")
    expect(page.locator("#seq-6 .permalink")).to_have_attribute(
        "title", "Link to this event. No fork here: seq 6 is inside turn 1, opened at seq 1 and still open; recover the session first or pick an earlier boundary."
    )
    expect(page.locator(".session-head .fork-unavailable")).to_contain_text("Fork whole session: not now")
    page.locator("#seq-0").hover()
    page.locator("#seq-0 .fork-here").click()
    page.locator("#seq-0 .fork-form").get_by_role("button", name="Create fork").click()
    page.wait_for_url(f"{server.url}/sessions/crashed-fork-0/", timeout=LIVE)
    expect(page.locator(".messages")).to_contain_text("Forked crashed at seq 0 into this session")
    expect(page.locator(".provenance")).to_contain_text("Forked from crashed at seq 0")
    child = Session.objects.get(parent_id="crashed")
    assert (child.seed_length, child.event_count) == (1, 1)
    expect(page.locator("#seq-0.inherited")).to_be_visible()


def test_without_javascript_the_control_is_a_form_page_that_still_forks(browser, server, plain_user):
    store(LONG_SESSION, session_id="long")
    page = open_page(browser, server, plain_user, "/sessions/long/")
    page.route(re.compile(r".*\.js$"), lambda route: route.abort())
    page.reload()
    page.locator(f"#seq-{LAST_TURN_END}").hover()
    page.locator(f"#seq-{LAST_TURN_END} .fork-here").click()
    page.wait_for_url(f"{server.url}/sessions/long/fork?boundary={LAST_TURN_END}", timeout=LIVE)
    page.get_by_role("button", name="Create fork").click()
    page.wait_for_url(f"{server.url}/sessions/long-fork-{LAST_TURN_END}/", timeout=LIVE)
    expect(page.locator(".messages")).to_contain_text(f"Forked long at seq {LAST_TURN_END} into this session")
