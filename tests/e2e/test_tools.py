"""A project's Tools page in a real Chromium: its admin adds a policy with a receipt pointer and a reconciler,
sees the reconciler's secret once, and the tool's class changes; a viewer reads the page with no form, and a
post of theirs is refused (no axe-core violations, and no CSP violation: the page runs no inline script)."""

import re

import pytest
from axe_playwright_python.sync_playwright import Axe
from playwright.sync_api import expect

from sessions_app import services
from sessions_app.log.events import validate_batch
from sessions_app.models import Role, ToolPolicy
from tests.access import member
from tests.e2e.conftest import PASSWORD, open_page
from tests.e2e.test_accessibility import axe_report
from tests.sessions_app.api.test_calls import CRASH

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

RECONCILER = "https://93.184.216.34/check"  # a public address given as an IP: the save-time check resolves nothing


@pytest.fixture
def crashed():
    services.create_session(session_id="crash", agent_name="billing-bot")
    services.append_events(session_id="crash", events=validate_batch(CRASH))


def csp_violations(page) -> list[str]:
    found: list[str] = []
    page.on("console", lambda message: found.append(message.text) if "Content Security Policy" in message.text else None)
    return found


def test_an_admin_adds_a_policy_with_a_reconciler_and_sees_its_secret_once(browser, server, crashed, django_user_model):
    admin = django_user_model.objects.create_user("alice", password=PASSWORD)
    member(admin, Role.ADMIN)
    page = open_page(browser, server, admin, "/projects/default/")
    violations = csp_violations(page)
    page.get_by_role("link", name="Tools").first.click()
    charge = page.locator('tr.tool-row[data-tool="charge_card"]')
    expect(charge).to_contain_text("no policy: treated as unknown, checked like an external effect")
    expect(charge.locator(".badge.se-unknown")).to_have_text("side effects unknown")

    page.fill("#id_pattern", "charge_*")
    page.select_option("#id_side_effect", "external_effect")
    page.fill("#id_note", "moves money")
    page.fill("#id_receipt_pointer", "/charge/id")
    page.fill("#id_check_url", RECONCILER)
    page.get_by_role("button", name="Save policy").click()

    secret = page.locator("#check-secret")
    expect(secret).to_have_value(re.compile(r"^whsec_"))
    assert secret.input_value() == ToolPolicy.objects.get(pattern="charge_*").check_secret
    expect(charge).to_contain_text("external effect")
    expect(charge).to_contain_text("/charge/id")
    expect(charge).to_contain_text("93.184.216.34")
    assert not axe_report(Axe(), page, "tools page with the secret")

    page.get_by_role("link", name="Done: back to the tools").click()
    expect(page.locator("#check-secret")).to_have_count(0)
    assert ToolPolicy.objects.get().check_secret not in page.content()
    expect(page.locator('tr.policy-row[data-pattern="charge_*"]')).to_contain_text("93.184.216.34")

    # A bad pointer is a form error next to its field; nothing changes.
    page.fill("#id_pattern", "charge_*")
    page.fill("#id_receipt_pointer", "charge/id")
    page.get_by_role("button", name="Save policy").click()
    expect(page.locator("#receipt_pointer-error")).to_contain_text("not an RFC 6901 JSON pointer")
    assert ToolPolicy.objects.get().receipt_pointer == "/charge/id"
    assert not violations


def test_a_viewer_reads_the_tools_but_has_no_form_and_a_post_is_refused(browser, server, crashed, django_user_model):
    viewer = django_user_model.objects.create_user("vic", password=PASSWORD)
    member(viewer, Role.VIEWER)
    page = open_page(browser, server, viewer, "/projects/")
    page.get_by_role("link", name="Tools and policies").click()
    expect(page.locator('tr.tool-row[data-tool="lookup"]')).to_be_visible()
    expect(page.locator("main form")).to_have_count(0)
    expect(page.get_by_role("button", name="Save policy")).to_have_count(0)
    csrf = next(c["value"] for c in page.context.cookies() if c["name"] == "csrftoken")
    refused = page.request.post(
        f"{server.url}/projects/default/tools/",
        form={"csrfmiddlewaretoken": csrf, "action": "save", "pattern": "lookup", "side_effect": "read_only"},
        headers={"Referer": f"{server.url}/projects/default/tools/"},
    )
    assert refused.status == 403 and "Only admins" in refused.text()
    assert not ToolPolicy.objects.exists()
