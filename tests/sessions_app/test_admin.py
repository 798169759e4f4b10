import io

import pytest
from django.core.management import call_command
from django.http import HttpRequest
from django.test import Client

from sessions_app import services
from sessions_app.log import events as log_events
from sessions_app.models import (
    ApiToken,
    AuditEntry,
    Event,
    Membership,
    Project,
    RecoveryRecord,
    Role,
    Session,
    ToolPolicy,
    WebhookEndpoint,
)
from tests.access import member, token_for
from tests.conftest import ApiClient
from tests.sessions_app import factories

pytestmark = pytest.mark.django_db

LOG_MODELS = ["session", "event", "recoveryrecord"]
SUPERUSER_MODELS = ["project", "apitoken", "auditentry", "webhookendpoint"]


def crashed_and_recovered(session_id: str, project: Project | None, recovered_by) -> Session:
    services.create_session(session_id=session_id, agent_name=f"{session_id}-bot", project=project)
    services.append_events(session_id=session_id, events=log_events.validate_batch(factories.worked_example()))
    services.recover(session_id=session_id, user=recovered_by)
    return Session.objects.get(id=session_id)


@pytest.fixture
def logs(django_user_model):
    """A crashed session of the default project, recovered: one row of every log model."""
    session = crashed_and_recovered("crashed", None, django_user_model.objects.create_user("someone"))
    ToolPolicy.objects.create(pattern="send_*", side_effect=ToolPolicy.EXTERNAL_EFFECT)
    return session


@pytest.fixture
def elsewhere(logs, django_user_model):
    """The same in another team's project, whose name must not show to people outside it."""
    project = Project.objects.create(slug="secret-team", name="Secret Team")
    return crashed_and_recovered("hidden-crash", project, django_user_model.objects.get(username="someone"))


@pytest.fixture
def root(django_user_model) -> Client:
    client = Client()
    client.force_login(django_user_model.objects.create_superuser("root", password="pw"))
    return client


def logged_in(django_user_model, username: str, *options: str) -> Client:
    """A user made the way docs/guide/command-line.md says: `create_token USERNAME [--staff]`, then a password."""
    call_command("create_token", username, *options, stdout=io.StringIO(), stderr=io.StringIO())
    user = django_user_model.objects.get(username=username)
    user.set_password("pw")
    user.save()
    client = Client()
    # A request: django-axes counts logins per client address.
    assert client.login(request=HttpRequest(), username=username, password="pw")
    return client


def object_pages(session: Session) -> dict[str, str]:
    """One change (or view) page of each log model, of this session."""
    return {
        "session": f"/admin/sessions_app/session/{session.pk}/change/",
        "event": f"/admin/sessions_app/event/{Event.objects.filter(session=session).first().pk}/change/",
        "recoveryrecord": f"/admin/sessions_app/recoveryrecord/{RecoveryRecord.objects.get(session=session).pk}/change/",
    }


def test_a_staff_operator_sees_every_log_page_of_their_project_and_reads_policies(logs, django_user_model):
    client = logged_in(django_user_model, "ops", "--staff")
    index = client.get("/admin/")
    assert index.status_code == 200
    for model in [*LOG_MODELS, "toolpolicy"]:
        assert f'href="/admin/sessions_app/{model}/"' in index.content.decode()
        assert client.get(f"/admin/sessions_app/{model}/").status_code == 200, model
    for model, page in object_pages(logs).items():
        response = client.get(page)
        assert response.status_code == 200 and "crashed" in response.content.decode(), model
    assert client.get(f"/admin/sessions_app/toolpolicy/{ToolPolicy.objects.get().pk}/change/").status_code == 200


def test_site_wide_tool_policies_rank_every_project_so_only_superusers_edit_them(logs, django_user_model, root):
    operator = logged_in(django_user_model, "ops", "--staff")
    policy = ToolPolicy.objects.get()
    assert operator.get("/admin/sessions_app/toolpolicy/add/").status_code == 403
    assert 'name="_save"' not in operator.get(f"/admin/sessions_app/toolpolicy/{policy.pk}/change/").content.decode()
    operator.post(f"/admin/sessions_app/toolpolicy/{policy.pk}/change/", {"side_effect": "read_only"})
    assert operator.post(f"/admin/sessions_app/toolpolicy/{policy.pk}/delete/", {"post": "yes"}).status_code == 403
    assert ToolPolicy.objects.get().side_effect == ToolPolicy.EXTERNAL_EFFECT

    response = root.post("/admin/sessions_app/toolpolicy/add/", {"pattern": "lookup_*", "side_effect": ToolPolicy.READ_ONLY, "note": ""})
    assert response.status_code == 302, response.content.decode()[-3000:]
    added = ToolPolicy.objects.get(pattern="lookup_*")
    assert added.project is None and added.check_secret == ""
    # Through the service: audited as a site-wide change.
    entry = AuditEntry.objects.get(action=AuditEntry.TOOL_POLICY_CHANGED)
    assert (entry.target, entry.project, entry.actor_name, entry.detail["scope"], entry.detail["created"]) == ("lookup_*", None, "root", "site", True)
    changed = root.post(f"/admin/sessions_app/toolpolicy/{added.pk}/change/", {"side_effect": ToolPolicy.IDEMPOTENT, "note": "", "receipt_pointer": "/id"})
    assert changed.status_code == 302 and ToolPolicy.objects.get(pk=added.pk).side_effect == ToolPolicy.IDEMPOTENT
    assert root.post(f"/admin/sessions_app/toolpolicy/{added.pk}/delete/", {"post": "yes"}).status_code == 302
    assert not ToolPolicy.objects.filter(pattern="lookup_*").exists()
    assert AuditEntry.objects.filter(action=AuditEntry.TOOL_POLICY_CHANGED).count() == 3


def test_the_admin_refuses_a_bad_pointer_or_address_as_form_errors(logs, root):
    bad = root.post("/admin/sessions_app/toolpolicy/add/", {"pattern": "x", "side_effect": "read_only", "receipt_pointer": "id", "check_url": "http://127.0.0.1:1/"})
    page = bad.content.decode()
    assert bad.status_code == 200 and "not an RFC 6901 JSON pointer" in page and "loopback" in page
    assert not ToolPolicy.objects.filter(pattern="x").exists()


def test_staff_see_and_filter_the_policies_of_their_projects_and_the_sites(elsewhere, django_user_model):
    ToolPolicy.objects.create(project=Project.default(), pattern="mine_*", side_effect=ToolPolicy.READ_ONLY)
    ToolPolicy.objects.create(project=elsewhere.project, pattern="theirs_*", side_effect=ToolPolicy.READ_ONLY)
    client = logged_in(django_user_model, "ops", "--staff")
    listing = client.get("/admin/sessions_app/toolpolicy/").content.decode()
    assert "send_*" in listing and "mine_*" in listing and "project default" in listing
    assert "theirs_*" not in listing and "Secret Team" not in listing and "secret-team" not in listing
    only_site = client.get("/admin/sessions_app/toolpolicy/", {"project__isnull": "True"}).content.decode()
    assert "send_*" in only_site and "mine_*" not in only_site
    only_mine = client.get("/admin/sessions_app/toolpolicy/", {"project__id__exact": Project.default().pk}).content.decode()
    assert "mine_*" in only_mine and "send_*" not in only_mine


def test_logs_stay_read_only_for_staff(logs, django_user_model):
    client = logged_in(django_user_model, "ops", "--staff")
    event = Event.objects.filter(session=logs).first()
    for model in LOG_MODELS:
        assert client.get(f"/admin/sessions_app/{model}/add/").status_code == 403, model
    assert client.post(f"/admin/sessions_app/event/{event.pk}/delete/", {"post": "yes"}).status_code == 403
    assert client.post(f"/admin/sessions_app/session/{logs.pk}/change/", {"agent_name": "x"}).status_code == 403
    assert Event.objects.filter(pk=event.pk).exists() and Session.objects.get(pk=logs.pk).agent_name == "crashed-bot"
    page = client.get(f"/admin/sessions_app/event/{event.pk}/change/").content.decode()
    assert 'name="_save"' not in page


def test_staff_see_no_logs_of_a_project_they_are_not_a_member_of(elsewhere, django_user_model):
    client = logged_in(django_user_model, "ops", "--staff")  # operator of the default project only
    for model in LOG_MODELS:
        listing = client.get(f"/admin/sessions_app/{model}/").content.decode()
        assert "crashed" in listing, model  # their own project's rows are listed ...
        assert "hidden-crash" not in listing and "Secret Team" not in listing, model  # ... the other's, not even in a filter
        found = client.get(f"/admin/sessions_app/{model}/", {"q": "hidden"}).content.decode()
        assert "hidden-crash" not in found and "0 results" in found, model


def test_staff_opening_another_projects_log_by_url_are_told_it_does_not_exist(elsewhere, django_user_model):
    client = logged_in(django_user_model, "ops", "--staff")
    for model, page in object_pages(elsewhere).items():
        response = client.get(page, follow=True)
        assert response.redirect_chain == [("/admin/", 302)], model
        assert "doesn’t exist" in response.content.decode(), model
        assert "hidden-crash-bot" not in response.content.decode(), model  # the message names only the id asked for
    assert client.get(f"/admin/sessions_app/session/{elsewhere.pk}/history/").status_code == 302


def test_a_member_of_both_projects_sees_both(elsewhere, django_user_model):
    client = logged_in(django_user_model, "ops", "--staff")
    member(django_user_model.objects.get(username="ops"), Role.VIEWER, Project.objects.get(slug="secret-team"))
    listing = client.get("/admin/sessions_app/session/").content.decode()
    assert "hidden-crash" in listing and "Secret Team" in listing
    assert client.get(object_pages(elsewhere)["event"]).status_code == 200


def test_the_recovery_preview_action_takes_only_sessions_the_user_sees(elsewhere, django_user_model):
    client = logged_in(django_user_model, "ops", "--staff")
    crashed_and_recovered("crashed-2", None, django_user_model.objects.get(username="someone"))
    services.create_session(session_id="open-here")
    services.append_events(session_id="open-here", events=log_events.validate_batch(factories.worked_example()))
    services.create_session(session_id="open-there", project=Project.objects.get(slug="secret-team"))
    services.append_events(session_id="open-there", events=log_events.validate_batch(factories.worked_example()))

    def preview(*ids):
        return client.post("/admin/sessions_app/session/", {"action": "preview_recovery", "_selected_action": list(ids)})

    assert preview("open-here")["Location"] == "/sessions/open-here/recovery"
    assert preview("open-there")["Location"] == "/admin/sessions_app/session/"  # nothing selected that they may see
    page = preview("open-here", "open-there", "crashed").content.decode()
    assert "open-here" in page and "open-there" not in page


def test_staff_who_are_members_of_no_project_see_empty_lists(logs, django_user_model):
    client = logged_in(django_user_model, "drifter")
    user = django_user_model.objects.get(username="drifter")
    services.set_membership(project=Project.default(), user=user, role=None)
    django_user_model.objects.filter(pk=user.pk).update(is_staff=True)
    for model in LOG_MODELS:
        listing = client.get(f"/admin/sessions_app/{model}/")
        assert listing.status_code == 200 and "crashed" not in listing.content.decode(), model


def test_projects_tokens_and_the_audit_log_are_for_superusers_only(logs, django_user_model, root):
    member(django_user_model.objects.create_user("ops", is_staff=True, password="pw"), Role.ADMIN)
    project_admin = Client()
    project_admin.force_login(django_user_model.objects.get(username="ops"))
    index = project_admin.get("/admin/").content.decode()
    for model in SUPERUSER_MODELS:
        assert f"/admin/sessions_app/{model}/" not in index, model
        assert project_admin.get(f"/admin/sessions_app/{model}/").status_code == 403, model
    assert project_admin.get(f"/admin/sessions_app/project/{Project.default().pk}/change/").status_code == 403
    for model in SUPERUSER_MODELS:
        assert root.get(f"/admin/sessions_app/{model}/").status_code == 200, model


def test_the_token_list_names_each_tokens_owner_project_scopes_and_state(django_user_model, root):
    alice = django_user_model.objects.create_user("alice")
    token_for(alice, Role.VIEWER, name="ci reader")
    services.revoke_token(token=ApiToken.objects.get(), by=None)
    token_for(alice, Role.VIEWER, name="dashboard")
    page = root.get("/admin/sessions_app/apitoken/").content.decode()
    for text in ["ci reader", "dashboard", "alice", "Default", "revoked", "active", ApiToken.objects.get(name="dashboard").prefix]:
        assert text in page, text
    revoked_only = root.get("/admin/sessions_app/apitoken/", {"state": "revoked"}).content.decode()
    assert "ci reader" in revoked_only and "dashboard" not in revoked_only
    detail = root.get(f"/admin/sessions_app/apitoken/{ApiToken.objects.get(name='dashboard').pk}/change/").content.decode()
    assert "read" in detail and ApiToken.objects.get(name="dashboard").token_sha256 not in detail


def test_revoking_tokens_in_the_admin_is_audited_and_the_api_then_refuses_them(django_user_model, root):
    alice = django_user_model.objects.create_user("alice")
    secret = token_for(alice, name="laptop")
    spare = token_for(alice, name="spare")
    api = ApiClient(secret)
    assert api.get("/api/v1/sessions").status_code == 200
    laptop = ApiToken.objects.get(name="laptop")

    response = root.post("/admin/sessions_app/apitoken/", {"action": "revoke", "_selected_action": [laptop.pk]}, follow=True)
    assert f"Revoked 1 token(s): {laptop.prefix}" in response.content.decode()
    assert api.get("/api/v1/sessions").status_code == 401
    assert ApiClient(spare).get("/api/v1/sessions").status_code == 200
    entry = AuditEntry.objects.get(action=AuditEntry.TOKEN_REVOKED)
    assert (entry.actor_name, entry.target, entry.project_id) == ("root", laptop.prefix, Project.default().pk)
    assert ApiToken.objects.filter(pk=laptop.pk).exists()  # kept, so lists and the audit log still name it

    again = root.post("/admin/sessions_app/apitoken/", {"action": "revoke", "_selected_action": [laptop.pk]}, follow=True)
    assert "already revoked" in again.content.decode()
    assert AuditEntry.objects.filter(action=AuditEntry.TOKEN_REVOKED).count() == 1


def test_tokens_are_neither_made_nor_deleted_in_the_admin(django_user_model, root):
    token_for(django_user_model.objects.create_user("alice"))
    token = ApiToken.objects.get()
    assert root.get("/admin/sessions_app/apitoken/add/").status_code == 403
    assert root.post(f"/admin/sessions_app/apitoken/{token.pk}/delete/", {"post": "yes"}).status_code == 403
    root.post("/admin/sessions_app/apitoken/", {"action": "delete_selected", "_selected_action": [token.pk], "post": "yes"})
    assert 'value="delete_selected"' not in root.get("/admin/sessions_app/apitoken/").content.decode()
    assert ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).exists()


def membership_form(project: Project, rows: list[dict], *, name: str | None = None) -> dict:
    """The project change form's POST: its fields and the membership inline's rows."""
    existing = [row for row in rows if row.get("id")]
    data = {
        "name": name or project.name,
        "memberships-TOTAL_FORMS": str(len(rows)),
        "memberships-INITIAL_FORMS": str(len(existing)),
        "memberships-MIN_NUM_FORMS": "0",
        "memberships-MAX_NUM_FORMS": "1000",
    }
    for index, row in enumerate(rows):
        for key, value in row.items():
            data[f"memberships-{index}-{key}"] = value
        data[f"memberships-{index}-project"] = str(project.pk)
    return data


def test_membership_changes_in_the_admin_are_audited(django_user_model, root):
    alice, bob = django_user_model.objects.create_user("alice"), django_user_model.objects.create_user("bob")
    response = root.post(
        "/admin/sessions_app/project/add/",
        {"slug": "billing", **membership_form(Project(name="Billing"), [{"user": alice.pk, "role": Role.ADMIN}])},
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    billing = Project.objects.get(slug="billing")
    alice_row = Membership.objects.get(project=billing, user=alice)
    assert alice_row.role == Role.ADMIN

    url = f"/admin/sessions_app/project/{billing.pk}/change/"
    response = root.post(url, membership_form(billing, [
        {"id": alice_row.pk, "user": alice.pk, "role": Role.ADMIN},
        {"user": bob.pk, "role": Role.MEMBER},
    ]))
    assert response.status_code == 302
    bob_row = Membership.objects.get(project=billing, user=bob)
    response = root.post(url, membership_form(billing, [
        {"id": alice_row.pk, "user": alice.pk, "role": Role.ADMIN},
        {"id": bob_row.pk, "user": bob.pk, "role": Role.OPERATOR},
    ]))
    assert response.status_code == 302 and Membership.objects.get(pk=bob_row.pk).role == Role.OPERATOR
    response = root.post(url, membership_form(billing, [
        {"id": alice_row.pk, "user": alice.pk, "role": Role.ADMIN},
        {"id": bob_row.pk, "user": bob.pk, "role": Role.OPERATOR, "DELETE": "on"},
    ]))
    assert response.status_code == 302 and not Membership.objects.filter(project=billing, user=bob).exists()

    trail = list(AuditEntry.objects.filter(project=billing).order_by("id").values_list("action", "target", "actor_name", "detail"))
    assert trail == [
        (AuditEntry.MEMBER_ADDED, "alice", "root", {"role": "admin"}),
        (AuditEntry.MEMBER_ADDED, "bob", "root", {"role": "member"}),
        (AuditEntry.MEMBER_CHANGED, "bob", "root", {"from": "member", "to": "operator"}),
        (AuditEntry.MEMBER_REMOVED, "bob", "root", {"role": "operator"}),
    ]


def test_the_admin_role_can_be_handed_over_in_one_save_but_not_dropped(django_user_model, root):
    alice, bob = django_user_model.objects.create_user("alice"), django_user_model.objects.create_user("bob")
    project = Project.objects.create(slug="billing", name="Billing")
    alice_row = Membership.objects.get(pk=services.set_membership(project=project, user=alice, role=Role.ADMIN).pk)
    bob_row = services.set_membership(project=project, user=bob, role=Role.MEMBER)
    url = f"/admin/sessions_app/project/{project.pk}/change/"

    dropped = root.post(url, membership_form(project, [
        {"id": alice_row.pk, "user": alice.pk, "role": Role.MEMBER},
        {"id": bob_row.pk, "user": bob.pk, "role": Role.MEMBER},
    ]))
    assert dropped.status_code == 200 and "A project keeps at least one admin" in dropped.content.decode()
    assert Membership.objects.get(pk=alice_row.pk).role == Role.ADMIN

    # The new admin is saved before the old one is lowered, so the order of the rows does not matter.
    handed_over = root.post(url, membership_form(project, [
        {"id": alice_row.pk, "user": alice.pk, "role": Role.MEMBER},
        {"id": bob_row.pk, "user": bob.pk, "role": Role.ADMIN},
    ]))
    assert handed_over.status_code == 302
    assert dict(Membership.objects.filter(project=project).values_list("user__username", "role")) == {"alice": "member", "bob": "admin"}


def test_a_membership_row_cannot_be_moved_to_another_user(django_user_model, root):
    alice, bob = django_user_model.objects.create_user("alice"), django_user_model.objects.create_user("bob")
    project = Project.objects.create(slug="billing", name="Billing")
    row = services.set_membership(project=project, user=alice, role=Role.ADMIN)
    root.post(f"/admin/sessions_app/project/{project.pk}/change/", membership_form(project, [{"id": row.pk, "user": bob.pk, "role": Role.ADMIN}]))
    assert list(Membership.objects.filter(project=project).values_list("user__username", flat=True)) == ["alice"]


def test_a_projects_slug_is_fixed_once_made_and_projects_are_not_deleted(logs, root):
    project = Project.default()
    response = root.post(f"/admin/sessions_app/project/{project.pk}/change/", {"slug": "renamed", **membership_form(project, [], name="Everyone")})
    assert response.status_code == 302
    project.refresh_from_db()
    assert (project.slug, project.name) == ("default", "Everyone")
    assert root.post(f"/admin/sessions_app/project/{project.pk}/delete/", {"post": "yes"}).status_code == 403
    assert Project.objects.filter(pk=project.pk).exists()


def test_the_audit_log_is_read_only_and_filters_by_project_and_action(elsewhere, django_user_model, root):
    services.set_membership(project=Project.objects.get(slug="secret-team"), user=django_user_model.objects.get(username="someone"), role=Role.VIEWER)
    entry = AuditEntry.objects.get(action=AuditEntry.MEMBER_ADDED)
    everything = root.get("/admin/sessions_app/auditentry/").content.decode()
    assert "hidden-crash" in everything and "crashed" in everything
    by_project = root.get("/admin/sessions_app/auditentry/", {"project__id__exact": Project.default().pk}).content.decode()
    assert "crashed" in by_project and "hidden-crash" not in by_project
    by_action = root.get("/admin/sessions_app/auditentry/", {"action__exact": AuditEntry.MEMBER_ADDED}).content.decode()
    assert "1 audit entry" in by_action and "someone" in by_action
    assert root.get("/admin/sessions_app/auditentry/add/").status_code == 403
    assert root.post(f"/admin/sessions_app/auditentry/{entry.pk}/delete/", {"post": "yes"}).status_code == 403
    assert 'name="_save"' not in root.get(f"/admin/sessions_app/auditentry/{entry.pk}/change/").content.decode()


def test_a_user_who_is_not_staff_cannot_open_the_admin(logs, django_user_model):
    client = logged_in(django_user_model, "bot")
    for model in [*LOG_MODELS, "toolpolicy", *SUPERUSER_MODELS]:
        assert client.get(f"/admin/sessions_app/{model}/").status_code == 302  # to the admin login


def test_webhooks_in_the_admin_are_checked_and_audited(django_user_model, root, settings):
    """Superusers add, change and delete webhooks through sessions_app.services.notify: a private address is the form's error."""
    settings.TURNLOG_WEBHOOK_ALLOW_PRIVATE = False
    form = {"project": Project.default().pk, "url": "http://127.0.0.1:9000/hook", "agent_patterns": "*", "kinds": '["stalled"]', "enabled": "on"}
    refused = root.post("/admin/sessions_app/webhookendpoint/add/", form)
    assert refused.status_code == 200 and "127.0.0.1 is a loopback address" in refused.content.decode()
    assert not WebhookEndpoint.objects.exists()
    added = root.post("/admin/sessions_app/webhookendpoint/add/", {**form, "url": "https://93.184.215.14/hook"})
    hook = WebhookEndpoint.objects.get()
    assert added.status_code == 302 and hook.kinds == ["stalled"] and hook.secret.startswith("whsec_")
    changed = root.post(f"/admin/sessions_app/webhookendpoint/{hook.pk}/change/", {**form, "url": "https://93.184.215.14/other", "kinds": '["held"]'})
    hook.refresh_from_db()
    assert changed.status_code == 302 and (hook.url, hook.kinds) == ("https://93.184.215.14/other", ["held"])
    assert root.post(f"/admin/sessions_app/webhookendpoint/{hook.pk}/delete/", {"post": "yes"}).status_code == 302
    assert not WebhookEndpoint.objects.exists()
    entries = AuditEntry.objects.filter(action=AuditEntry.WEBHOOK_CHANGED, actor_name="root").order_by("pk")
    assert [sorted(k for k in ("created", "changed", "deleted") if k in e.detail) for e in entries] == [["created"], ["changed"], ["deleted"]]


def test_a_policy_saved_or_deleted_in_the_admin_asks_the_worker_to_re_read_receipts(root):
    from sessions_app.models import ReceiptSweep

    stamps = {f"{name}_{part}": value for name in ("created_at", "updated_at") for part, value in enumerate(["2026-01-01", "00:00:00"])}
    form = {"pattern": "charge_*", "side_effect": ToolPolicy.EXTERNAL_EFFECT, "note": "", "receipt_pointer": "/id", **stamps}
    response = root.post("/admin/sessions_app/toolpolicy/add/", form)
    assert response.status_code == 302, response.content.decode()[:2000]
    assert list(ReceiptSweep.objects.values_list("project_id", "pattern")) == [(None, "charge_*")]
    policy = ToolPolicy.objects.get(pattern="charge_*")
    assert root.post(f"/admin/sessions_app/toolpolicy/{policy.pk}/delete/", {"post": "yes"}).status_code == 302
    assert list(ReceiptSweep.objects.values_list("pattern", flat=True)) == ["charge_*", "charge_*"]
