"""The Content-Security-Policy in a real Chromium: every page, htmx and its live socket work with no violation."""

import re

import pytest
from playwright.sync_api import expect

from sessions_app import services
from tests.e2e.conftest import PASSWORD, api_post
from tests.sessions_app.log.test_recovery import WORKED_EXAMPLE
from tests.sessions_app.services.test_recovery import store

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

LIVE = 15_000  # ms: a live frame must arrive well within this

# Runs in every document before its own scripts: each violation the browser reports is kept.
REPORT_VIOLATIONS = """
document.addEventListener("securitypolicyviolation", function (event) {
  window.reportViolation(event.violatedDirective + " blocked " + (event.blockedURI || "inline") +
                         " at " + event.sourceFile + ":" + event.lineNumber + " on " + document.location.pathname);
});
"""


@pytest.fixture
def watched_page(browser):
    """A page that records every CSP violation (events and Chromium's console errors about them)."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.violations = []
    page.expose_function("reportViolation", lambda text: page.violations.append(text))
    page.add_init_script(REPORT_VIOLATIONS)
    page.on("console", lambda message: "Content Security Policy" in message.text and page.violations.append(message.text))
    yield page
    page.close()


def log_in(page, server, user):
    page.goto(f"{server.url}/login/")
    page.fill("#id_username", user.username)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{server.url}/")


def test_every_page_works_under_the_policy_without_a_violation(watched_page, server, django_user_model):
    page = watched_page
    admin = django_user_model.objects.create_user("root", password=PASSWORD, is_staff=True, is_superuser=True)
    store(WORKED_EXAMPLE, session_id="crashed")
    store(WORKED_EXAMPLE, session_id="crashed-too")
    store([("user_message", {"content": "a"}), ("user_message", {"content": "b"})], session_id="parent")
    child = services.fork(session_id="parent", boundary=0, new_session_id="child")
    services.fork(session_id=child.id, boundary=0, new_session_id="grandchild")

    log_in(page, server, admin)
    # The list's search box: htmx requests the rows and pushes the URL.
    page.fill("#q", "crash")
    expect(page).to_have_url(re.compile(r"\?q=crash"), timeout=LIVE)
    expect(page.locator("#session-rows")).not_to_contain_text("parent")

    for path in ["/sessions/crashed/", "/sessions/crashed/?view=raw", "/sessions/crashed/recovery",
                 "/sessions/crashed/fork?boundary=0", "/admin/", "/admin/sessions_app/session/crashed/change/",
                 "/api/v1/docs", "/no-such-page/"]:  # fmt: skip
        page.goto(f"{server.url}{path}")
        page.wait_for_load_state("load")

    # The admin's own scripts (the action bar) and the recovery preview action.
    page.goto(f"{server.url}/admin/sessions_app/session/")
    for session_id in ("crashed", "crashed-too"):  # one alone goes to its dashboard preview
        page.check(f"input[name=_selected_action][value={session_id}]")
    page.select_option("select[name=action]", "preview_recovery")
    page.get_by_role("button", name="Go").click()
    expect(page.locator("#content")).to_contain_text("Each session below has an open turn")

    # The lineage indents by depth, set from data-depth by the static script.
    page.goto(f"{server.url}/sessions/child/lineage")
    indents = [float(page.locator(f".lineage li >> nth={n}").evaluate("el => getComputedStyle(el).paddingLeft").removesuffix("px")) for n in range(3)]
    assert indents[0] < indents[1] < indents[2], indents

    # Fork here: htmx fetches the form into the page.
    page.goto(f"{server.url}/sessions/parent/")
    page.locator("#seq-0").hover()
    page.locator("#seq-0 .fork-here").click()
    expect(page.locator("#seq-0 .fork-form")).to_be_visible(timeout=LIVE)

    page.evaluate("window.reportViolation('probe')")  # the recorder itself works
    assert page.violations == ["probe"]


def test_a_live_update_arrives_over_the_socket_without_a_violation(watched_page, server, plain_user):
    page = watched_page
    store([("user_message", {"content": "first"})], session_id="live")
    log_in(page, server, plain_user)
    page.goto(f"{server.url}/sessions/live/")
    expect(page.locator("#live-state")).to_have_attribute("data-state", "open", timeout=LIVE)
    status, _ = api_post(server, plain_user, "/api/v1/sessions/live/events", {"events": [
        {"type": "turn_start", "data": {"turn": 1}},
        {"type": "assistant_message", "data": {"content": "working on it"}},
    ]})  # fmt: skip
    assert status == 201
    expect(page.locator("#turn-1")).to_contain_text("working on it", timeout=LIVE)

    page.goto(f"{server.url}/")
    expect(page.locator("#session-rows")).to_contain_text("live")
    api_post(server, plain_user, "/api/v1/sessions", {"id": "newcomer"})
    expect(page.locator("#session-rows")).to_contain_text("newcomer", timeout=LIVE)
    assert page.violations == []
