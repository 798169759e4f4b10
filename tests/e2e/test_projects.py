"""Project pages in a real Chromium: an admin manages members and tokens, and the session list follows a chosen project."""

import json
import re
import urllib.error
import urllib.request

import pytest
from axe_playwright_python.sync_playwright import Axe
from playwright.sync_api import expect

from sessions_app import services
from sessions_app.models import ApiToken, AuditEntry, Membership, Project, Role
from tests.access import member, token_for
from tests.e2e.conftest import PASSWORD, wait_until
from tests.e2e.test_accessibility import axe_report
from tests.e2e.test_csp import log_in, watched_page  # noqa: F401  (the fixture that records CSP violations)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

LIVE = 15_000  # ms
# Counts the page's live sockets as htmx opens them (the document stays; htmx swaps its main).
COUNT_SOCKET_OPENS = 'window.socketOpens = 0; document.addEventListener("htmx:wsOpen", function () { window.socketOpens++; });'


def api_status(server, secret: str, path: str = "/api/v1/sessions") -> int:
    request = urllib.request.Request(f"{server.url}{path}", headers={"Authorization": f"Bearer {secret}"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            json.loads(response.read())
            return response.status
    except urllib.error.HTTPError as refused:
        return refused.code


def api_create(server, secret: str, session_id: str) -> int:
    request = urllib.request.Request(
        f"{server.url}/api/v1/sessions", data=json.dumps({"id": session_id}).encode(), method="POST",
        headers={"Authorization": f"Bearer {secret}", "Content-Type": "application/json"},
    )  # fmt: skip
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.status


def test_an_admin_adds_a_member_gives_them_a_token_sees_its_secret_once_and_revokes_it(watched_page, server, django_user_model):  # noqa: F811
    page = watched_page
    team = Project.objects.create(slug="team", name="The Team")
    admin = django_user_model.objects.create_user("alice", password=PASSWORD)
    member(admin, Role.ADMIN, team)
    dave = django_user_model.objects.create_user("dave", password=PASSWORD)

    log_in(page, server, admin)
    page.get_by_role("link", name="Projects").click()
    page.get_by_role("link", name="Members, tokens, audit log").click()
    expect(page).to_have_url(f"{server.url}/projects/team/")

    # Add dave as a member.
    page.fill("#id_username", "dave")
    page.select_option("#id_role", "member")
    page.get_by_role("button", name="Add member").click()
    expect(page.locator(".messages")).to_contain_text("Added dave with the role member.")
    expect(page.locator(f"#member-{dave.pk}")).to_contain_text("dave")
    assert Membership.objects.get(project=team, user=dave).role == Role.MEMBER

    # A token for dave: choosing him as owner fetches the form again, with only a member's scopes.
    page.get_by_role("link", name="API tokens").click()
    page.select_option("#id_owner", str(dave.pk))
    expect(page.locator("input[name=scopes][value=recover]")).to_be_disabled(timeout=LIVE)
    expect(page.locator("input[name=scopes][value=append]")).to_be_enabled()
    page.fill("#id_name", "dave's agent")
    page.check("input[name=scopes][value=append]")
    page.get_by_role("button", name="Create token").click()
    expect(page.locator(".token-created")).to_contain_text("this is the only time it is shown")
    secret = page.locator("#token-secret").input_value()
    assert secret.startswith("tl_")
    token = ApiToken.objects.get(user=dave)
    assert token.scopes == ["append", "read"] and token.created_by == admin
    assert api_status(server, secret) == 200

    # Back on the list the secret is gone for good: only its prefix shows.
    page.get_by_role("link", name="Done: back to the tokens").click()
    row = page.locator(f"#token-{token.pk}")
    expect(row).to_contain_text(f"{token.prefix}…")
    expect(row).to_contain_text("active")
    assert secret not in page.content()

    # Revoke it, confirming on the page the button leads to.
    row.get_by_role("link", name=re.compile("Revoke")).click()
    expect(page.locator(".confirm")).to_contain_text("This cannot be undone")
    page.get_by_role("button", name="Revoke token").click()
    expect(page.locator(".messages")).to_contain_text("it no longer authenticates")
    expect(page.locator(f"#token-{token.pk}")).to_contain_text("revoked")
    assert api_status(server, secret) == 401

    # The audit log tells who did what.
    page.get_by_role("link", name="Audit log").click()
    rows = page.locator("table.audit tbody tr")
    expect(rows.nth(0)).to_contain_text("Token revoked")
    expect(rows.nth(1)).to_contain_text("Token created")
    expect(rows.nth(2)).to_contain_text("Member added")
    for n in range(3):
        expect(rows.nth(n)).to_contain_text("alice")
    page.select_option("select[name=action]", AuditEntry.TOKEN_CREATED)
    page.get_by_role("button", name="Filter").click()
    expect(rows).to_have_count(1)
    expect(rows.nth(0)).to_contain_text("dave's agent")
    assert page.violations == []


def test_the_session_list_follows_the_chosen_project_live(watched_page, server, django_user_model):  # noqa: F811
    page = watched_page
    team = Project.objects.create(slug="team", name="The Team")
    user = django_user_model.objects.create_user("leo", password=PASSWORD)
    member(user)
    member(user, Role.VIEWER, team)
    services.create_session(session_id="in-default")
    services.create_session(session_id="in-team", project=team)

    page.add_init_script(COUNT_SOCKET_OPENS)
    log_in(page, server, user)
    table = page.locator("table.sessions")
    expect(table.locator("thead")).to_contain_text("Project")
    wait_until(page, "window.socketOpens === 1", LIVE)

    page.select_option("select[name=project]", "team")
    expect(page).to_have_url(re.compile(r"project=team"), timeout=LIVE)
    expect(page.locator("#session-rows")).not_to_contain_text("in-default")
    expect(page.locator("#session-rows")).to_contain_text("in-team")
    expect(table.locator("thead")).not_to_contain_text("Project")
    expect(page.locator("h1")).to_contain_text("Sessions of The Team")
    assert "project=team" in table.get_attribute("ws-connect")

    # The swapped-in table's socket filters by the project too (sessions made through the
    # server, which publishes them: a token's project is where its sessions go).
    wait_until(page, "window.socketOpens === 2", LIVE)
    agent = django_user_model.objects.create_user("agent")
    assert api_create(server, token_for(agent), "new-in-default") == 201
    assert api_create(server, token_for(agent, project=team), "new-in-team") == 201
    expect(page.locator("#session-rows")).to_contain_text("new-in-team", timeout=LIVE)
    expect(page.locator("#session-rows")).not_to_contain_text("new-in-default")
    assert page.violations == []


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_project_pages_pass_axe_and_reflow_at_320_px(browser, server, django_user_model, scheme):
    team = Project.objects.create(slug="team", name="The Team")
    admin = django_user_model.objects.create_user("alice", password=PASSWORD)
    member(admin, Role.ADMIN, team)
    member(admin, Role.VIEWER)  # two projects: the list shows its Project column and selector
    viewer = django_user_model.objects.create_user("bob")
    member(viewer, Role.VIEWER, team)
    token_for(viewer, Role.VIEWER, team, name="reader")
    services.revoke_token(token=ApiToken.objects.get(), by=admin)
    services.create_session(session_id="in-team", project=team)
    axe = Axe()
    context = browser.new_context(color_scheme=scheme, bypass_csp=True, viewport={"width": 1280, "height": 900})
    page = context.new_page()
    log_in(page, server, admin)
    reports = []

    def check(label):
        reports.append(axe_report(axe, page, label))
        page.set_viewport_size({"width": 320, "height": 640})
        width = page.evaluate("document.documentElement.scrollWidth")
        reports.append(f"{label}: the page is {width} px wide at 320 px" if width > 320 else "")
        page.set_viewport_size({"width": 1280, "height": 900})

    check("session list across projects")
    for label, path in [("projects", "/projects/"), ("members", "/projects/team/"), ("tokens", "/projects/team/tokens"),
                        ("audit", "/projects/team/audit"), ("revoke", f"/projects/team/tokens/{ApiToken.objects.get().pk}/revoke"),
                        ("admins only", "/projects/default/")]:  # fmt: skip
        page.goto(f"{server.url}{path}")
        check(label)
    page.goto(f"{server.url}/projects/team/")
    page.fill("#id_username", "nobody")
    page.get_by_role("button", name="Add member").click()
    expect(page.locator("#username-errors")).to_be_visible()
    check("members with an error")
    page.goto(f"{server.url}/projects/team/tokens")
    page.get_by_role("button", name="Create token").click()
    expect(page.locator(".token-created")).to_be_visible()
    check("token created")
    context.close()
    failures = "\n".join(report for report in reports if report)
    assert not failures, failures
