"""A project admin deletes a session in the browser (a confirmation, then sessions_app.retention): a second tab
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
