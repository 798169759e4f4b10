"""A project admin deletes a session in the browser (a confirmation, then sessions_app.services.retention): a second tab
watching it says it is gone and stops, the session list drops its row, and a reload is a 404."""

import pytest
from playwright.sync_api import expect

from sessions_app.models import AuditEntry, Role, Session
from tests.access import member
from tests.e2e.conftest import PASSWORD, open_page
from tests.sessions_app.services.test_recovery import store

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

LIVE = 15_000  # ms


@pytest.fixture
def project_admin(django_user_model):
    user = django_user_model.objects.create_user("ada", password=PASSWORD)
    member(user, Role.ADMIN)
    return user


def test_deleting_a_watched_session_tells_its_viewers_and_the_list(browser, server, project_admin):
    store([("user_message", {"content": "to be deleted"})], session_id="doomed")
    store([("user_message", {"content": "stays"})], session_id="stays")
    watcher = open_page(browser, server, project_admin, "/sessions/doomed/")
    expect(watcher.locator("#live-state")).to_have_text("Live", timeout=LIVE)
    listing = open_page(browser, server, project_admin, "/")
    expect(listing.locator("#session-doomed")).to_be_visible()

    admin = open_page(browser, server, project_admin, "/sessions/doomed/")
    admin.click("text=Delete this session…")
    expect(admin.locator("h1")).to_contain_text("Delete doomed?")
    admin.click("button:has-text('Delete session')")
    admin.wait_for_url(f"{server.url}/?project=default")
    expect(admin.locator(".messages")).to_contain_text("Deleted session doomed and its 1 event.")

    expect(watcher.locator("#live-state")).to_have_text("Deleted: this session no longer exists", timeout=LIVE)
    expect(listing.locator("#session-doomed")).to_have_count(0, timeout=LIVE)
    expect(listing.locator("#session-stays")).to_be_visible()
    assert watcher.reload().status == 404
    assert not Session.objects.filter(pk="doomed").exists()
    assert AuditEntry.objects.get(action=AuditEntry.SESSION_DELETED).actor_name == "ada"


def test_retentions_pages_have_no_axe_violations_and_reflow_at_320_px(browser, server, project_admin):
    from axe_playwright_python.sync_playwright import Axe

    from sessions_app import services
    from sessions_app.models import Project
    from tests.e2e.test_accessibility import axe_report

    project = Project.default()
    project.retention_days = 7
    project.save()
    store([("user_message", {"content": "hi"})], session_id="parent")
    services.fork(session_id="parent", new_session_id="child")
    store([("turn_start", {"turn": 1})], session_id="crashed")
    Session.objects.filter(pk__in=["parent", "crashed"]).update(last_activity_at="2020-01-01T00:00:00Z", retained_from="2020-01-01T00:00:00Z")
    pages = [
        ("retention tab", "/projects/default/retention", "table.held tbody tr.held-blocked"),
        ("delete confirmation", "/sessions/child/delete", "form button.danger"),
        ("delete refused: forks", "/sessions/parent/delete", ".alert.warn"),
    ]
    axe, reports = Axe(), []
    page = open_page(browser, server, project_admin, "/")
    for width in (1280, 320):
        page.set_viewport_size({"width": width, "height": 800})
        for label, path, settled in pages:
            page.goto(f"{server.url}{path}")
            expect(page.locator(settled).first).to_be_attached(timeout=LIVE)
            reports.append(axe_report(axe, page, f"{label} at {width} px"))
            scrolled = page.evaluate("document.documentElement.scrollWidth")
            reports.append(f"{label}: the page is {scrolled} px wide" if scrolled > width else "")
    failures = "\n".join(report for report in reports if report)
    assert not failures, failures
