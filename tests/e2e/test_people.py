"""People in a real Chromium: an admin invites a colleague through the pages, the colleague sets a
password from the link, logs in and sees only what the viewer role allows; refusals are styled pages."""

import pytest
from axe_playwright_python.sync_playwright import Axe
from playwright.sync_api import expect

from sessions_app import services
from sessions_app.models import AuditEntry, Membership, Project, Role
from tests.access import member
from tests.e2e.conftest import PASSWORD
from tests.e2e.test_accessibility import axe_report
from tests.e2e.test_csp import REPORT_VIOLATIONS, log_in, watched_page  # noqa: F401  (the fixture that records CSP violations)
from tests.sessions_app.services.test_forks import CRASHED
from tests.sessions_app.services.test_recovery import store

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

LIVE = 15_000  # ms
VERAS_PASSWORD = "vera picks a long one"


def test_an_admin_invites_a_colleague_who_sets_a_password_logs_in_and_sees_what_a_viewer_may(
    watched_page, browser, server, django_user_model  # noqa: F811
):
    page = watched_page
    axe, reports = Axe(), []
    admin = django_user_model.objects.create_user("alice", password=PASSWORD)
    default = member(admin, Role.ADMIN)
    store(CRASHED[:6], session_id="shared")  # in the default project: fork spots, nothing open
    hidden = Project.objects.create(slug="hidden", name="Hidden")
    services.create_session(session_id="elsewhere", project=hidden)

    # The admin invites vera as a viewer, from the members page.
    log_in(page, server, admin)
    page.get_by_role("link", name="Projects").click()
    page.get_by_role("link", name="Members, tokens, audit log").click()
    page.fill("#id_invite_username", "vera")
    page.select_option("#id_invite_role", "viewer")
    reports.append(axe_report(axe, page, "members page with the invitation form"))
    page.get_by_role("button", name="Invite").click()
    expect(page.locator(".token-created")).to_contain_text("vera is invited as viewer")
    reports.append(axe_report(axe, page, "invitation link"))
    link = page.locator("#invitation-link").input_value()
    assert link.startswith(f"{server.url}/account/set-password/")
    assert Membership.objects.get(project=default, user__username="vera").role == Role.VIEWER
    assert AuditEntry.objects.filter(action=AuditEntry.MEMBER_ADDED, target="vera", actor=admin).exists()

    # Vera, in a browser of her own, sets her password from the link and logs in.
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    theirs = context.new_page()
    theirs.violations = []
    theirs.expose_function("reportViolation", lambda text: theirs.violations.append(text))
    theirs.add_init_script(REPORT_VIOLATIONS)
    theirs.goto(link)
    expect(theirs.locator("h1")).to_have_text("Set your password")
    reports.append(axe_report(axe, theirs, "set-password page"))
    theirs.fill("#id_new_password1", VERAS_PASSWORD)
    theirs.fill("#id_new_password2", VERAS_PASSWORD)
    theirs.get_by_role("button", name="Set password").click()
    expect(theirs).to_have_url(f"{server.url}/login/")
    expect(theirs.locator(".messages")).to_contain_text("Your password is set: log in as vera.")
    theirs.fill("#id_username", "vera")
    theirs.fill("#id_password", VERAS_PASSWORD)
    theirs.click("button[type=submit]")
    theirs.wait_for_url(f"{server.url}/")

    # She sees the default project's session, not the other project's, and reads it without fork controls.
    expect(theirs.locator("#session-rows")).to_contain_text("shared")
    expect(theirs.locator("#session-rows")).not_to_contain_text("elsewhere")
    theirs.goto(f"{server.url}/sessions/shared/")
    expect(theirs.locator("#live-state")).to_have_attribute("data-state", "open", timeout=LIVE)
    expect(theirs.locator(".fork-here")).to_have_count(0)
    assert theirs.goto(f"{server.url}/sessions/elsewhere/").status == 404

    # What a viewer may not use answers the styled refusal, with the header and the reason.
    refused = theirs.goto(f"{server.url}/sessions/shared/fork?boundary=4")
    assert refused.status == 403
    expect(theirs.locator("main h1")).to_have_text("You may not do this here")
    expect(theirs.locator("main")).to_contain_text("may not fork sessions")
    expect(theirs.get_by_role("link", name="Account")).to_be_visible()
    reports.append(axe_report(axe, theirs, "403 page"))
    assert theirs.goto(f"{server.url}/projects/default/").status == 403
    expect(theirs.locator("main h1")).to_contain_text("Only admins manage")

    # Her account: her role, no tokens; the link does not work a second time.
    theirs.get_by_role("link", name="Account").click()
    expect(theirs.locator("main")).to_contain_text("viewer")
    expect(theirs.locator("table.tokens td.empty")).to_be_visible()
    reports.append(axe_report(axe, theirs, "account page"))
    assert theirs.goto(link).status == 410
    expect(theirs.locator("main h1")).to_have_text("This link no longer works")
    reports.append(axe_report(axe, theirs, "used link"))
    assert theirs.violations == []
    context.close()

    failures = "\n".join(report for report in reports if report)
    assert not failures, f"axe-core found violations:\n{failures}"
    assert page.violations == []


def test_a_user_changes_their_password_through_the_account_page(watched_page, server, django_user_model):  # noqa: F811
    page = watched_page
    user = django_user_model.objects.create_user("carol", password=PASSWORD)
    member(user, Role.MEMBER)
    log_in(page, server, user)
    page.get_by_role("link", name="Account").click()
    page.get_by_role("link", name="Change your password").click()
    page.fill("#id_old_password", PASSWORD)
    page.fill("#id_new_password1", VERAS_PASSWORD)
    page.fill("#id_new_password2", VERAS_PASSWORD)
    page.get_by_role("button", name="Change password").click()
    expect(page).to_have_url(f"{server.url}/account/")
    expect(page.locator(".messages")).to_contain_text("Your password is changed.")
    page.reload()  # still logged in
    expect(page.locator("main h1")).to_contain_text("Your account: carol")
    user.refresh_from_db()
    assert user.check_password(VERAS_PASSWORD)
    assert page.violations == []
