"""A project admin adds and removes a price on the Prices page in the browser (a date input and an hour, not free
text), and the page has no axe violations and reflows at 320 px, in both colour schemes."""

import pytest
from playwright.sync_api import expect

from sessions_app import services
from sessions_app.log.events import validate_batch
from sessions_app.models import ModelPrice, Project, Role
from tests.access import member
from tests.e2e.conftest import PASSWORD, open_page
from tests.sessions_app import factories as f

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

LIVE = 15_000  # ms


@pytest.fixture
def project_admin(django_user_model):
    user = django_user_model.objects.create_user("ada", password=PASSWORD)
    member(user, Role.ADMIN)
    return user


def test_an_admin_adds_a_price_with_a_date_and_an_hour_then_removes_it(browser, server, project_admin):
    from axe_playwright_python.sync_playwright import Axe

    from tests.e2e.test_accessibility import axe_report

    services.create_session(session_id="s", agent_name="bot")
    usage = {"input_tokens": 10, "output_tokens": 2}
    services.append_events(session_id="s", events=validate_batch([f.assistant("a", metadata={"usage": usage, "model": m}) for m in ("gpt-4o", "house-9")]))
    page = open_page(browser, server, project_admin, "/projects/default/prices")
    expect(page.locator('tr.used-model[data-model="house-9"]')).to_contain_text("no bundled price")
    page.fill("#id_model", "house-9")
    page.fill("#id_valid_from_date", "2026-11-02")
    page.select_option("#id_valid_from_hour", "10")
    page.fill("#id_input", "2")
    page.fill("#id_output", "8")
    page.click("button:has-text('Save price')")
    expect(page.locator(".messages")).to_contain_text("Saved the price of house-9 from 2026-11-02 10:00 UTC", timeout=LIVE)
    expect(page.locator('tr.price-row[data-model="house-9"]')).to_contain_text("2026-11-02 10:00")
    assert Project.default().prices_version == 1

    reports = []
    axe = Axe()
    for scheme in ("light", "dark"):
        page.emulate_media(color_scheme=scheme)
        for width in (1280, 320):
            page.set_viewport_size({"width": width, "height": 800})
            reports.append(axe_report(axe, page, f"prices, {scheme}, at {width} px"))
            scrolled = page.evaluate("document.documentElement.scrollWidth")
            reports.append(f"the page is {scrolled} px wide at {width}" if scrolled > width else "")
    page.set_viewport_size({"width": 1280, "height": 800})
    page.click("button[aria-label^='Remove the price of house-9']")
    expect(page.locator(".messages")).to_contain_text("Removed the price of house-9", timeout=LIVE)
    assert not ModelPrice.objects.exists()
    failures = "\n".join(report for report in reports if report)
    assert not failures, failures
