"""Every page, in light and dark colour schemes, passes axe-core's WCAG 2.0/2.1 A and AA rules in a real Chromium;
and the pages look finished: header hierarchy, tab bars, the Live tag, the 404 page, the admin list, clean search URLs."""

import re

import pytest
from axe_playwright_python.sync_playwright import Axe
from playwright.sync_api import expect

from sessions_app import services
from sessions_app.log.events import validate_batch
from tests.e2e.conftest import PASSWORD, open_page
from tests.sessions_app.log.test_recovery import WORKED_EXAMPLE
from tests.sessions_app.services.test_recovery import store

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

AXE_OPTIONS = {
    "runOnly": {"type": "tag", "values": ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]},
    "resultTypes": ["violations"],
}
LIVE = 15_000  # ms


def seed_every_page_state(user):
    """A running, a stalled, a recovered (by user), a forked and a compacted session: every state a page can show."""
    store(WORKED_EXAMPLE, session_id="crashed")  # January timestamps: stalled, with a recovery preview
    store(WORKED_EXAMPLE, session_id="recovered")
    services.recover(session_id="recovered", user=user, note="checked the mail server")
    services.fork(session_id="recovered", boundary="last", new_session_id="forked")
    services.fork(session_id="forked", boundary="last", new_session_id="forked-again")
    services.create_session(session_id="running", agent_name="research-agent", metadata={"model": "demo"})
    services.append_events(session_id="running", events=validate_batch([
        {"type": "user_message", "data": {"content": "summarise the report"}},
        {"type": "turn_start", "data": {"turn": 1}},
        {"type": "assistant_message", "data": {"content": "reading it", "tool_calls": [{"id": "c1", "name": "read_file", "arguments": {"path": "r.md"}}]}},
    ]))  # fmt: skip
    realistic = store([("user_message", {"content": "hello"})])  # a generated 32-character id, as agents get
    services.fork(session_id=realistic.id, boundary="last")
    store([
        ("user_message", {"content": "a long exchange"}),
        ("assistant_message", {"content": "a long answer"}),
        ("user_message", {"content": "summary of the exchange", "surface_op": ["replace", 0, 2]}),
    ], session_id="compacted")  # fmt: skip


# (label, path, wait for: a selector whose presence means the page is settled)
PAGES = [
    ("session list", "/", "#session-rows tr"),
    ("filtered list", "/?status=stalled&q=crash", "#session-rows tr"),
    ("list without a match", "/?q=no-such-session", "#session-rows td.empty"),
    ("running session", "/sessions/running/", "#live-state[data-state=open]"),
    ("stalled session", "/sessions/crashed/", "#live-state[data-state=open]"),
    ("stalled session, raw log", "/sessions/crashed/?view=raw", "#live-state[data-state=open]"),
    ("recovery preview", "/sessions/crashed/recovery", ".appends"),
    ("recovered session", "/sessions/recovered/?highlight=10-12#seq-10", "#live-state[data-state=open]"),
    ("recovered session, raw log", "/sessions/recovered/?view=raw", "#live-state[data-state=open]"),
    ("recovery history", "/sessions/recovered/recovery", "table.history"),
    ("forked session", "/sessions/forked/", "#live-state[data-state=open]"),
    ("compacted session", "/sessions/compacted/", "#live-state[data-state=open]"),
    ("compacted session, raw log", "/sessions/compacted/?view=raw", "#live-state[data-state=open]"),
    ("lineage", "/sessions/forked/lineage", ".lineage"),
    ("lineage of a lone session", "/sessions/running/lineage", ".lineage"),
    ("timeline of a crashed session", "/sessions/crashed/timeline", "svg.timeline"),
    ("timeline of a running session", "/sessions/running/timeline", "svg.timeline"),
    ("a fork compared with its parent", "/sessions/forked/compare", ".compare-prefix"),
    ("two sessions compared", "/sessions/running/compare?with=crashed", ".compare-sides"),
    ("calls to check", "/calls/", "#call-rows tr.call"),
    ("calls, filtered, none matching", "/calls/?state=error&tag=nothing", "#no-calls"),
    ("calls, every filter chosen", "/calls/?state=error&state=pending&class=read_only&settled=any&since=2026-01-01T00:00&until=2026-02-01T00:00", "#filter-state"),
    ("a bad query parameter", "/calls/?cursor=garbage", ".bad-request"),
    ("agents", "/agents/", "table.agents tbody tr"),
    ("an agent with crashes", "/agents/agent?name=", "table.crashes tbody tr"),
    ("an agent without crashes", "/agents/agent?name=research-agent", "table.crashes td.empty"),
    ("fork page", "/sessions/recovered/fork?boundary=12", ".fork-form input[name=id]"),
    ("refused fork page", "/sessions/crashed/fork?boundary=6", ".fork-refused"),
    ("404", "/sessions/no-such-session/", "h1"),
    ("your account", "/account/", "table.tokens"),
    ("change your password", "/account/password/", "form.login"),
    ("a used or expired set-password link", "/account/set-password/MQ/abc-123/", "main h1"),
    ("admin index", "/admin/", "#content"),
    ("admin session list", "/admin/sessions_app/session/", "#result_list"),
    ("admin session", "/admin/sessions_app/session/crashed/change/", "#content"),
    ("admin event list", "/admin/sessions_app/event/", "#result_list"),
]


def axe_report(axe, page, label):
    """One readable line per element that violates a rule ('' when there are none)."""
    lines = []
    for violation in axe.run(page, options=AXE_OPTIONS).response["violations"]:
        for node in violation["nodes"]:
            messages = "; ".join(check["message"] for check in node["any"] + node["all"] + node["none"])
            lines.append(f"{label} {page.url}: {violation['id']} ({violation['impact']}) at {' '.join(map(str, node['target']))}: {messages}")
    return "\n".join(lines)


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_every_page_has_no_axe_violations(browser, server, staff_user, scheme):
    staff_user.is_superuser = True  # sees every admin page
    staff_user.save()
    seed_every_page_state(staff_user)
    axe = Axe()
    context = browser.new_context(color_scheme=scheme, bypass_csp=True, viewport={"width": 1280, "height": 900})
    page = context.new_page()
    reports = []

    page.goto(f"{server.url}/login/")
    reports.append(axe_report(axe, page, "login"))
    page.fill("#id_username", staff_user.username)
    page.fill("#id_password", "wrong")
    page.click("button[type=submit]")
    expect(page.locator("form.login")).to_contain_text("correct username and password")
    reports.append(axe_report(axe, page, "login with an error"))
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{server.url}/")

    for label, path, settled in PAGES:
        page.goto(f"{server.url}{path}")
        expect(page.locator(settled).first).to_be_attached(timeout=LIVE)
        reports.append(axe_report(axe, page, label))

    page.goto(f"{server.url}/admin/sessions_app/session/")
    for session_id in ("crashed", "running"):
        page.check(f"input[name=_selected_action][value={session_id}]")
    page.select_option("select[name=action]", "preview_recovery")
    page.get_by_role("button", name="Go").click()
    expect(page.locator("#content")).to_contain_text("Each session below has an open turn")
    # The form's answer is in the DOM before its stylesheets load (goto waits for them, a click does not): axe
    # would judge the links unstyled.
    page.wait_for_load_state("load")
    reports.append(axe_report(axe, page, "admin recovery preview of several sessions"))

    page.goto(f"{server.url}/sessions/recovered/")
    page.locator(".fork-here").first.focus()
    page.locator(".fork-here").first.press("Enter")
    expect(page.locator("main .fork-form")).to_be_visible(timeout=LIVE)
    reports.append(axe_report(axe, page, "fork form opened in place"))
    page.goto(f"{server.url}/sessions/crashed/")
    page.locator(".session-head .fork-unavailable").focus()
    expect(page.locator(".session-head .fork-unavailable .fork-why")).to_be_visible()
    reports.append(axe_report(axe, page, "why the whole session cannot be forked"))
    page.locator("#seq-0 .permalink").focus()
    page.keyboard.press("Tab")  # "Fork here" in sight on focus
    expect(page.locator("#seq-0 .fork-here")).to_be_focused()
    reports.append(axe_report(axe, page, "Fork here focused"))
    page.locator("#seq-0 time").focus()  # an instant's UTC and local time
    expect(page.locator("#seq-0 .time-local")).not_to_be_empty()
    reports.append(axe_report(axe, page, "a time's exact instant shown"))
    page.locator("body").press("?")
    expect(page.locator("dialog#shortcuts")).to_be_visible()
    reports.append(axe_report(axe, page, "the keyboard shortcuts"))
    page.keyboard.press("Escape")

    context.close()
    failures = "\n".join(report for report in reports if report)
    assert not failures, f"axe-core found violations in {scheme} mode:\n{failures}"


def test_pages_reflow_at_320_px_without_axe_violations(browser, server, plain_user):
    """WCAG 1.4.10: nothing but a data table's own region scrolls sideways at 320 CSS px."""
    seed_every_page_state(plain_user)
    axe = Axe()
    page = open_page(browser, server, plain_user, "/")
    page.set_viewport_size({"width": 320, "height": 640})
    reports = []
    for label, path, settled in PAGES:
        if path.startswith("/admin/"):
            continue  # Django's admin, with its own responsive styles
        page.goto(f"{server.url}{path}")
        expect(page.locator(settled).first).to_be_attached(timeout=LIVE)
        reports.append(axe_report(axe, page, label))
        width = page.evaluate("document.documentElement.scrollWidth")
        reports.append(f"{label}: the page is {width} px wide" if width > 320 else "")
    failures = "\n".join(report for report in reports if report)
    assert not failures, f"at 320 px:\n{failures}"


def test_the_session_id_heads_the_page_above_the_agent_name(browser, server, plain_user):
    seed_every_page_state(plain_user)
    page = open_page(browser, server, plain_user, "/sessions/running/")
    heading = font_size(page, ".session-head h1 code")
    assert heading > font_size(page, ".session-head .agent")
    assert heading > font_size(page, "body")


def font_size(page, selector):
    return float(page.locator(selector).first.evaluate("element => getComputedStyle(element).fontSize").removesuffix("px"))


def test_the_live_tag_sits_above_the_log_not_over_it(browser, server, plain_user):
    seed_every_page_state(plain_user)
    page = open_page(browser, server, plain_user, "/sessions/running/")
    for path in ["/sessions/running/", "/sessions/crashed/?view=raw"]:
        page.goto(f"{server.url}{path}")
        expect(page.locator("#live-state")).to_have_attribute("data-state", "open", timeout=LIVE)
        live = page.locator("#live-state").bounding_box()
        log = page.locator("#blocks > *, .raw-log").first.bounding_box()
        assert live["y"] + live["height"] <= log["y"], path


def test_every_view_of_a_session_keeps_the_tab_bar(browser, server, plain_user):
    seed_every_page_state(plain_user)
    page = open_page(browser, server, plain_user, "/")
    for path, tab in [
        ("/sessions/crashed/", "Transcript"),
        ("/sessions/crashed/?view=raw", "Raw log"),
        ("/sessions/crashed/timeline", "Timeline"),
        ("/sessions/forked/lineage", "Lineage"),
        ("/sessions/recovered/lineage", "Lineage"),
        ("/sessions/crashed/recovery", "Recovery"),
        ("/sessions/recovered/recovery", "Recovery (1)"),
    ]:
        page.goto(f"{server.url}{path}")
        tabs = page.get_by_role("navigation", name="Views of this log")
        expect(tabs.get_by_role("link")).to_have_count(5)
        expect(tabs.locator("[aria-current=page]")).to_have_text(tab)


def test_the_404_page_is_a_styled_page_of_the_site(browser, server, plain_user):
    page = open_page(browser, server, plain_user, "/")
    response = page.goto(f"{server.url}/sessions/no-such-session/")
    assert response.status == 404
    expect(page.get_by_role("heading", level=1)).to_have_text("Page not found")
    expect(page.get_by_role("navigation", name="Site").get_by_role("link", name="Sessions")).to_be_visible()
    assert page.locator("body").evaluate("body => getComputedStyle(body).fontFamily").startswith("system-ui")


def test_the_admin_session_list_shows_every_column_at_1400_px(browser, server, staff_user):
    seed_every_page_state(staff_user)
    page = open_page(browser, server, staff_user, "/admin/sessions_app/session/")
    page.set_viewport_size({"width": 1400, "height": 900})
    results = page.locator("#changelist .results")
    assert results.evaluate("element => element.scrollWidth <= element.clientWidth")
    expect(page.locator("#result_list th.column-parent")).to_be_in_viewport()


def test_searching_the_list_pushes_a_clean_url_that_reloads_as_the_page(browser, server, plain_user):
    seed_every_page_state(plain_user)
    page = open_page(browser, server, plain_user, "/")
    page.fill("#q", "forked")
    page.wait_for_url(re.compile(r"q=forked"), timeout=LIVE)
    expect(page.locator("#session-rows tr")).to_have_count(2)
    assert "fragment" not in page.url
    page.reload()
    expect(page.get_by_role("heading", name="Sessions")).to_be_visible()
    expect(page.locator("#session-rows tr")).to_have_count(2)
    page.get_by_role("combobox", name="Status").select_option("stalled")
    page.wait_for_url(re.compile(r"status=stalled"), timeout=LIVE)
    expect(page.locator("#session-rows")).to_contain_text("No session matches.")
    assert "fragment" not in page.url
