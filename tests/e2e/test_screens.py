"""Screens that read like a product, in a real Chromium against a real Daphne: "Fork here" on hover and focus only,
exact instants (UTC and the viewer's time) on hover and focus, the ledger's state at 390 px, and the keyboard shortcuts."""

import re

import pytest
from playwright.sync_api import expect

from sessions_app import services
from sessions_app.log.events import validate_batch
from tests.e2e.conftest import PASSWORD
from tests.e2e.test_fork_flow import LAST_TURN_END, LONG_SESSION
from tests.sessions_app.log.test_recovery import WORKED_EXAMPLE
from tests.sessions_app.services.test_recovery import store

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

LIVE = 15_000  # ms


def log_in(browser, server, user, path, **context):
    """A logged-in page at path, in a context of its own (a viewport, a time zone)."""
    page = browser.new_context(**{"viewport": {"width": 1280, "height": 900}, **context}).new_page()
    page.goto(f"{server.url}/login/?next={path}")
    page.fill("#id_username", user.username)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{server.url}{path}*")
    return page


def shown(locator) -> bool:
    """In sight: not clipped away (a clipped control keeps its box, and its place in the tab order)."""
    return locator.evaluate("el => getComputedStyle(el).clipPath === 'none'")


# "Fork here"


def test_fork_here_shows_only_on_hover_or_focus_of_a_boundary_and_nothing_is_printed_elsewhere(browser, server, plain_user):
    store(LONG_SESSION, session_id="long")
    page = log_in(browser, server, plain_user, "/sessions/long/")
    boundary = page.locator(f"#seq-{LAST_TURN_END}")  # a turn_end closing an outermost turn
    control = boundary.locator(".fork-here")
    boundary.scroll_into_view_if_needed()
    page.mouse.move(0, 0)
    assert not shown(control)
    expect(page.locator("main")).not_to_contain_text("No fork here")  # no line prints it
    expect(page.locator(f"#seq-{LAST_TURN_END - 1} .fork-here")).to_have_count(0)  # inside a turn: no control at all
    expect(page.locator(f"#seq-{LAST_TURN_END - 1} .permalink")).to_have_attribute("title", re.compile(r"No fork here: seq \d+ is inside turn"))

    boundary.hover()
    assert shown(control)
    page.mouse.move(0, 0)
    assert not shown(control)

    # The keyboard: Tab reaches it, it shows with a visible focus ring, and Enter opens the form.
    boundary.locator(".permalink").focus()
    page.keyboard.press("Tab")
    expect(control).to_be_focused()
    assert shown(control)
    assert control.evaluate("el => getComputedStyle(el).outlineStyle") != "none"
    page.keyboard.press("Enter")
    expect(boundary.locator(".fork-form")).to_be_visible(timeout=LIVE)
    assert shown(control)  # stays in sight while its form is open


# Exact instants


def test_a_time_shows_its_instant_in_utc_and_the_viewers_time_on_hover_and_on_focus(browser, server, plain_user):
    store(WORKED_EXAMPLE, session_id="crashed")  # written in January 2026 (tests' fixed times)
    page = log_in(browser, server, plain_user, "/sessions/crashed/", timezone_id="Asia/Tokyo")
    when = page.locator("#seq-0 .when")
    time = when.locator("time")
    tip = when.locator(".time-tip")
    expect(time).to_have_text(re.compile(r"ago$"))
    utc = time.get_attribute("datetime")
    assert utc.endswith("+00:00")
    expect(tip.locator(".time-local")).to_contain_text("your time (Asia/Tokyo, UTC+09:00)")
    text = tip.inner_text()
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", text)
    page.mouse.move(0, 0)
    assert tip.bounding_box()["width"] <= 1  # out of sight until asked for
    time.hover()
    assert tip.bounding_box()["width"] > 100
    page.mouse.move(0, 0)
    assert tip.bounding_box()["width"] <= 1
    time.focus()
    assert tip.bounding_box()["width"] > 100
    # The local time is the UTC instant moved by nine hours.
    utc_words = tip.locator(".time-utc").inner_text()
    local_words = tip.locator(".time-local").inner_text()
    hours = lambda words: int(re.search(r" (\d\d):", words)[1])  # noqa: E731
    assert (hours(utc_words) + 9) % 24 == hours(local_words)


def test_a_time_arriving_in_a_live_frame_gets_its_local_time_too(browser, server, plain_user):
    services.create_session(session_id="running", agent_name="research-agent")
    page = log_in(browser, server, plain_user, "/sessions/running/", timezone_id="America/New_York")
    expect(page.locator("#live-state[data-state=open]")).to_be_attached(timeout=LIVE)
    services.append_events(session_id="running", events=validate_batch([{"type": "user_message", "data": {"content": "hello"}}]))
    local = page.locator("#seq-0 .time-local")
    expect(local).to_contain_text("your time (America/New_York, UTC-0", timeout=LIVE)


# 390 px


def test_at_390_px_the_ledgers_state_column_is_in_view_without_scrolling(browser, server, plain_user):
    store(WORKED_EXAMPLE, session_id="crashed")
    page = log_in(browser, server, plain_user, "/sessions/crashed/?calls=all", viewport={"width": 390, "height": 844})
    region = page.locator("#ledger-panel .table-scroll")
    state = page.locator("#ledger-panel td.col-state").first
    expect(state).to_be_visible()
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    box, within = state.bounding_box(), region.bounding_box()
    assert box["x"] + box["width"] <= within["x"] + within["width"] + 1, (box, within)
    assert region.evaluate("el => el.scrollWidth <= el.clientWidth + 1")  # nothing to scroll to
    for least_needed in ("args", "notes", "turn", "time"):  # went first; the call's card has them
        expect(page.locator(f"#ledger-panel th.col-{least_needed}")).to_be_hidden()

    page.goto(f"{server.url}/calls/?state=tool_not_started&state=tool_outcome_unknown&state=pending&settled=any")
    state = page.locator("table.calls td.col-state").first
    expect(state).to_be_visible()
    region = page.locator(".table-scroll")
    assert state.bounding_box()["x"] + state.bounding_box()["width"] <= region.bounding_box()["x"] + region.bounding_box()["width"] + 1


# Keyboard shortcuts


def test_j_and_k_move_between_turns_o_toggles_a_card_l_the_ledger_and_question_mark_the_list(browser, server, plain_user):
    store(LONG_SESSION, session_id="long")
    page = log_in(browser, server, plain_user, "/sessions/long/")
    heads = page.locator("#blocks .turn-head")
    page.keyboard.press("j")
    expect(heads.nth(0)).to_be_focused()
    page.keyboard.press("j")
    expect(heads.nth(1)).to_be_focused()
    page.keyboard.press("j")
    expect(heads.nth(2)).to_be_focused()
    page.keyboard.press("k")
    expect(heads.nth(1)).to_be_focused()
    assert heads.nth(1).evaluate("el => getComputedStyle(el).outlineStyle") != "none"  # focus stays visible
    page.keyboard.press("l")
    expect(page.locator("#ledger-panel")).to_be_focused()
    page.keyboard.press("?")
    dialog = page.locator("dialog#shortcuts")
    expect(dialog).to_be_visible()
    expect(dialog).to_contain_text("Next / previous turn")
    page.keyboard.press("j")  # the dialog has the keyboard
    expect(page.locator("#ledger-panel")).not_to_be_focused()
    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()


def test_o_opens_and_closes_the_focused_card(browser, server, plain_user):
    store(WORKED_EXAMPLE, session_id="crashed")
    page = log_in(browser, server, plain_user, "/sessions/crashed/")
    details = page.locator("#blocks .card details.args").first
    details.locator("summary").focus()
    was_open = details.evaluate("el => el.open")
    page.keyboard.press("o")
    assert details.evaluate("el => el.open") is not was_open
    page.keyboard.press("o")
    assert details.evaluate("el => el.open") is was_open
    expect(details.locator("summary")).to_be_focused()


def test_slash_focuses_the_search_and_t_follows_the_timeline_link(browser, server, plain_user):
    store(WORKED_EXAMPLE, session_id="crashed")
    page = log_in(browser, server, plain_user, "/")
    page.keyboard.press("/")
    expect(page.locator("#q")).to_be_focused()
    page.goto(f"{server.url}/sessions/crashed/")
    page.keyboard.press("/")  # no search box here: the session list's, focused
    page.wait_for_url(f"{server.url}/#q")
    expect(page.locator("#q")).to_be_focused()
    page.goto(f"{server.url}/sessions/crashed/")
    page.keyboard.press("t")  # the Timeline tab
    page.wait_for_url(f"{server.url}/sessions/crashed/timeline")
    page.goto(f"{server.url}/")
    page.keyboard.press("t")  # no timeline on the list: nothing happens
    assert page.url == f"{server.url}/"


@pytest.mark.parametrize("key", ["j", "k", "o", "/", "t", "l", "?"])
def test_no_shortcut_fires_inside_a_field_or_with_a_modifier(browser, server, plain_user, key):
    store(LONG_SESSION, session_id="long")
    page = log_in(browser, server, plain_user, "/sessions/long/")
    note = page.locator("details.add-note").first
    note.locator("summary").click()
    field = note.locator("textarea").first
    field.focus()
    page.keyboard.press(key)
    expect(field).to_be_focused()
    expect(field).to_have_value(key)  # typed, not taken
    expect(page.locator("dialog#shortcuts")).to_be_hidden()
    assert page.url == f"{server.url}/sessions/long/"
    permalink = page.locator("#blocks .turn-head .permalink").first
    permalink.focus()
    page.keyboard.press(f"Control+{key}" if key not in "/?" else f"Alt+{key}")
    expect(page.locator("dialog#shortcuts")).to_be_hidden()
    expect(permalink).to_be_focused()
    assert page.url == f"{server.url}/sessions/long/"
