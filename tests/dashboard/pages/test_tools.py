"""A project's Tools page (dashboard.pages.tools) and its settings form (dashboard.pages.project_settings), through
Django's test client: what every member reads, what only admins change, and the class each tool gets."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from sessions_app.models import AuditEntry, Project, ReceiptSweep, Role, ToolPolicy
from tests.access import member
from tests.sessions_app.api.http import append, make_session
from tests.sessions_app.api.test_calls import CRASH, quiet

pytestmark = pytest.mark.django_db

PAGE = "/projects/default/tools/"
PUBLIC_URL = "https://93.184.216.34/check"


def logged_in(django_user_model, name: str, role: str) -> Client:
    user = django_user_model.objects.create_user(name)
    member(user, role)
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def admin(django_user_model):
    return logged_in(django_user_model, "alice", Role.ADMIN)


@pytest.fixture
def viewer(django_user_model):
    return logged_in(django_user_model, "vic", Role.VIEWER)


@pytest.fixture
def crashed(api):
    make_session(api, "crash")
    assert append(api, "crash", CRASH).status_code == 201
    quiet("crash")


def tool_row(page: str, name: str) -> str:
    found = re.search(rf'<tr class="tool-row[^"]*" data-tool="{re.escape(name)}">(.*?)</tr>', page, re.S)
    assert found, name
    return found.group(1)


def test_every_tool_used_is_listed_with_its_class_counts_and_policy_and_one_without_is_flagged(viewer, crashed):
    ToolPolicy.objects.create(pattern="look*", side_effect="read_only", receipt_pointer="/id", check_url=PUBLIC_URL)
    page = viewer.get(PAGE).content.decode()
    charge, lookup = tool_row(page, "charge_card"), tool_row(page, "lookup")
    assert "side effects unknown" in charge and "no policy: treated as unknown, checked like an external effect" in charge
    assert 'href="/calls/?project=default&amp;tool=charge_card&amp;state=tool_outcome_unknown">1</a>' in charge
    assert "read-only" in lookup and "/id" in lookup and "93.184.216.34" in lookup and "no policy" not in lookup
    assert "1 tool has no policy" in page


def test_viewers_read_the_page_without_forms_and_their_posts_are_refused(viewer, crashed):
    page = viewer.get(PAGE).content.decode()
    main = page.split('<main id="main">', 1)[1].split("</main>", 1)[0]
    assert "<form" not in main and "The project's admins change them." in main
    refused = viewer.post(PAGE, {"action": "save", "pattern": "charge_card", "side_effect": "read_only"})
    assert refused.status_code == 403 and "Only admins" in refused.content.decode()
    assert not ToolPolicy.objects.exists()


def test_outsiders_are_told_the_project_does_not_exist(django_user_model):
    Project.objects.create(slug="other", name="Other")
    outsider = logged_in(django_user_model, "olga", Role.ADMIN)  # an admin of the default project only
    assert outsider.get("/projects/other/tools/").status_code == 404
    assert outsider.post("/projects/other/tools/", {"pattern": "x", "side_effect": "read_only"}).status_code == 404


def test_an_admin_adds_a_policy_and_sees_the_reconciler_secret_once(admin, crashed):
    answer = admin.post(PAGE, {"action": "save", "pattern": "charge_*", "side_effect": "external_effect", "note": "money",
                               "receipt_pointer": "/id", "check_url": PUBLIC_URL})  # fmt: skip
    policy = ToolPolicy.objects.get()
    assert answer.status_code == 200 and "no-store" in answer["Cache-Control"]
    assert policy.check_secret.startswith("whsec_") and policy.check_secret in answer.content.decode()
    assert policy.project == Project.default() and ReceiptSweep.objects.filter(pattern="charge_*").exists()
    page = admin.get(PAGE).content.decode()
    assert policy.check_secret not in page
    assert "external effect" in tool_row(page, "charge_card")
    # Saved again with the same address: no secret shown.
    again = admin.post(PAGE, {"action": "save", "pattern": "charge_*", "side_effect": "idempotent", "check_url": PUBLIC_URL, "receipt_pointer": "/id"})
    assert again.status_code == 302 and ToolPolicy.objects.get().check_secret == policy.check_secret
    assert "idempotent" in tool_row(admin.get(PAGE).content.decode(), "charge_card")


def test_the_edit_link_fills_the_form_and_delete_removes_the_projects_policy(admin):
    ToolPolicy.objects.create(project=Project.default(), pattern="send_*", side_effect="idempotent", note="mail")
    ToolPolicy.objects.create(pattern="site_*", side_effect="read_only")
    page = admin.get(PAGE + "?edit=send_*").content.decode()
    assert 'name="pattern" value="send_*"' in page and 'value="idempotent" selected' in page and 'value="mail"' in page
    assert page.count('value="delete"') == 1  # the site's policy is a superuser's
    assert admin.post(PAGE, {"action": "delete", "pattern": "send_*"}).status_code == 302
    assert list(ToolPolicy.objects.values_list("pattern", flat=True)) == ["site_*"]
    entry = AuditEntry.objects.get(action=AuditEntry.TOOL_POLICY_CHANGED)
    assert (entry.target, entry.detail["deleted"], entry.actor_name) == ("send_*", True, "alice")
    audit = admin.get("/projects/default/audit").content.decode()
    assert '<a href="/projects/default/tools/"><code>send_*</code></a>' in audit


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({"receipt_pointer": "id"}, "is not an RFC 6901 JSON pointer"),
        ({"check_url": "http://127.0.0.1:9/check"}, "127.0.0.1 is a loopback address"),
        ({"side_effect": "unknown"}, "Select a valid choice"),
    ],
)
def test_bad_input_is_a_form_error_and_stores_nothing(admin, fields, error):
    answer = admin.post(PAGE, {"action": "save", "pattern": "charge_*", "side_effect": "external_effect", **fields})
    assert answer.status_code == 422 and error in answer.content.decode()
    assert not ToolPolicy.objects.exists()


def test_a_project_policy_overrides_the_site_one_on_the_page(admin, crashed):
    ToolPolicy.objects.create(pattern="charge_card", side_effect="read_only")
    ToolPolicy.objects.create(pattern="*", side_effect="idempotent")
    page = admin.get(PAGE).content.decode()
    assert "read-only" in tool_row(page, "charge_card") and "idempotent" in tool_row(page, "lookup")
    admin.post(PAGE, {"action": "save", "pattern": "charge_card", "side_effect": "external_effect"})
    admin.post(PAGE, {"action": "save", "pattern": "look*", "side_effect": "external_effect"})
    page = admin.get(PAGE).content.decode()
    assert "external effect" in tool_row(page, "charge_card") and "(project)" in tool_row(page, "charge_card")
    assert "external effect" in tool_row(page, "lookup") and "look*" in tool_row(page, "lookup")


def test_the_project_list_and_tabs_link_the_tools_page(admin, viewer):
    assert 'href="/projects/default/tools/"' in viewer.get("/projects/").content.decode()
    assert 'href="/projects/default/tools/"' in admin.get("/projects/default/").content.decode()


def test_an_admin_turns_automatic_recovery_of_settled_crashes_on_and_off(admin, viewer):
    assert 'id="auto-recover-settled"' in admin.get("/projects/default/").content.decode()
    assert admin.post("/projects/default/settings", {"auto_recover_settled": "on"}).status_code == 302
    assert Project.default().auto_recover_settled
    assert 'id="auto-recover-settled" checked' in admin.get("/projects/default/").content.decode()
    admin.post("/projects/default/settings", {})
    assert not Project.default().auto_recover_settled
    entries = AuditEntry.objects.filter(action=AuditEntry.PROJECT_SETTINGS_CHANGED).order_by("id")
    assert [(e.target, e.detail) for e in entries] == [
        ("default", {"field": "auto_recover_settled", "before": False, "after": True}),
        ("default", {"field": "auto_recover_settled", "before": True, "after": False}),
    ]
    assert viewer.post("/projects/default/settings", {"auto_recover_settled": "on"}).status_code == 403
    assert not Project.default().auto_recover_settled


def test_api_and_page_agree(admin, api, crashed):
    ToolPolicy.objects.create(pattern="lookup", side_effect="read_only")
    body = api.get("/api/v1/projects/default/tools").json()
    page = admin.get(PAGE).content.decode()
    for tool in body["tools"]:
        assert f">{tool['calls']}</a>" in tool_row(page, tool["name"])



def test_the_reconcilers_attempts_of_the_projects_calls_are_listed_newest_first_with_a_link_to_the_card(viewer, crashed):
    from sessions_app.models import CheckAttempt, Project, Session

    other = Project.objects.create(slug="other", name="Other")
    Session.objects.create(id="elsewhere", project=other)
    CheckAttempt.objects.create(session_id="crash", call_id="p1", pattern="charge_*", status=503, error="HTTP 503 <b>busy</b>")
    CheckAttempt.objects.create(session_id="crash", call_id="p1", pattern="charge_*", status=200, outcome="happened")
    CheckAttempt.objects.create(session_id="elsewhere", call_id="x1", pattern="charge_*", status=None, error="another project's")
    page = viewer.get(PAGE).content.decode()
    rows = re.findall(r'<tr class="attempt-row[^"]*">(.*?)</tr>', page, re.S)
    assert len(rows) == 2 and "another project" not in page
    assert "happened" in rows[0] and "503" in rows[1]
    assert "HTTP 503 &lt;b&gt;busy&lt;/b&gt;" in rows[1]  # an endpoint's words are escaped
    assert 'href="/sessions/crash/#' in rows[0]
