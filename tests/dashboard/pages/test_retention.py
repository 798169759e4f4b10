"""Retention's pages (dashboard.pages.retention): a project's Retention tab and a session's delete action, through
Django's test client; and the Project admin, which changes retention through the same audited function."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from sessions_app import services
from sessions_app.log.events import validate_batch
from sessions_app.models import AuditEntry, Event, Project, Role, Session
from tests.access import member
from tests.sessions_app import factories as f

pytestmark = pytest.mark.django_db


def client_of(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def admin(django_user_model):
    user = django_user_model.objects.create_user("alice")
    member(user, Role.ADMIN)
    return user


@pytest.fixture
def operator(django_user_model):
    user = django_user_model.objects.create_user("otto")
    member(user, Role.OPERATOR)
    return user


def stored(session_id: str, items, days_quiet: float = 0) -> None:
    services.create_session(session_id=session_id, agent_name="bot")
    services.append_events(session_id=session_id, events=validate_batch(items))
    if days_quiet:
        then = timezone.now() - timedelta(days=days_quiet)
        Session.objects.filter(pk=session_id).update(last_activity_at=then, retained_from=then)


def test_an_admin_sets_retention_on_the_projects_page_and_it_is_audited(admin):
    client = client_of(admin)
    page = client.get("/projects/default/retention")
    assert page.status_code == 200 and "kept forever" in page.content.decode()
    answer = client.post("/projects/default/retention", {"retention_days": "30"})
    assert answer.status_code == 302 and answer["Location"] == "/projects/default/retention"
    assert Project.default().retention_days == 30
    entry = AuditEntry.objects.get(action=AuditEntry.RETENTION_CHANGED)
    assert (entry.actor_name, entry.detail) == ("alice", {"before": None, "after": 30})
    refused = client.post("/projects/default/retention", {"retention_days": "0"})
    assert refused.status_code == 422 and "greater than or equal to 1" in refused.content.decode()
    assert Project.default().retention_days == 30
    assert client.post("/projects/default/retention", {"retention_days": ""}).status_code == 302
    assert Project.default().retention_days is None and AuditEntry.objects.filter(action=AuditEntry.RETENTION_CHANGED).count() == 2


def test_the_retention_tab_lists_the_sessions_kept_past_it_and_why(admin):
    project = Project.default()
    project.retention_days = 7
    project.save()
    stored("crashed", f.worked_example(), days_quiet=10)
    stored("parent", [f.user("hi")], days_quiet=10)
    services.fork(session_id="parent", new_session_id="child")
    stored("quiet", [f.user("hi")], days_quiet=10)
    text = client_of(admin).get("/projects/default/retention").content.decode()
    assert 'class="held-blocked"' in text and "crashed" in text and "blocking" in text and "still unrecovered" in text
    assert 'class="held-has_forks"' in text and "it has forks" in text and "Retention counts from" in text
    assert "/sessions/quiet/" not in text  # deletable: the sweep's, not listed


def test_an_admin_deletes_a_session_after_confirming_and_its_page_is_then_a_404(admin):
    stored("old", [f.user("hi"), f.assistant(calls=["c1"]), f.tool_call("c1"), f.tool_result("c1")])
    client = client_of(admin)
    page = client.get("/sessions/old/").content.decode()
    assert 'href="/sessions/old/delete"' in page
    confirm = client.get("/sessions/old/delete")
    assert confirm.status_code == 200 and "Its 4 events" in confirm.content.decode() and Session.objects.filter(pk="old").exists()
    answer = client.post("/sessions/old/delete")
    assert answer.status_code == 302 and answer["Location"] == "/?project=default"
    assert not Session.objects.filter(pk="old").exists() and not Event.objects.filter(session_id="old").exists()
    assert "Deleted session old and its 4 events." in client.get(answer["Location"]).content.decode()
    assert client.get("/sessions/old/").status_code == 404
    assert AuditEntry.objects.get(action=AuditEntry.SESSION_DELETED).actor_name == "alice"


def test_a_parent_with_forks_is_refused_with_their_names_and_nothing_goes(admin):
    stored("parent", [f.user("hi")])
    services.fork(session_id="parent", new_session_id="child")
    client = client_of(admin)
    for answer in (client.get("/sessions/parent/delete"), client.post("/sessions/parent/delete")):
        text = answer.content.decode()
        assert answer.status_code == 409 and "/sessions/child/" in text and "Delete the forks first" in text
    assert Session.objects.count() == 2 and not AuditEntry.objects.filter(action=AuditEntry.SESSION_DELETED).exists()


def test_an_operator_sees_no_delete_action_and_is_refused_it(operator):
    stored("old", [f.user("hi")])
    client = client_of(operator)
    assert "/sessions/old/delete" not in client.get("/sessions/old/").content.decode()
    assert client.post("/sessions/old/delete").status_code == 403 and Session.objects.filter(pk="old").exists()


def test_the_project_admin_changes_retention_through_the_audited_function(django_user_model):
    root = django_user_model.objects.create_superuser("root", password="x")
    project = Project.default()
    client = client_of(root)
    form = {"name": project.name, "retention_days": "90", "memberships-TOTAL_FORMS": "0", "memberships-INITIAL_FORMS": "0"}
    answer = client.post(f"/admin/sessions_app/project/{project.pk}/change/", form)
    assert answer.status_code == 302, answer.content.decode()[:2000]
    assert Project.default().retention_days == 90
    entry = AuditEntry.objects.get(action=AuditEntry.RETENTION_CHANGED)
    assert (entry.actor_name, entry.detail) == ("root", {"before": None, "after": 90})
    assert client.post(f"/admin/sessions_app/project/{project.pk}/change/", {**form, "retention_days": "0"}).status_code == 200
    assert Project.default().retention_days == 90


def test_the_audit_log_says_what_went_and_who_or_which_retention_deleted_it(admin):
    from sessions_app.services import retention

    stored("by-hand", [f.user("hi"), f.assistant(calls=["c1"])])
    retention.delete_session(session_id="by-hand", actor=admin)
    project = Project.default()
    retention.set_retention(project=project, days=30, actor=admin)
    stored("by-policy", [f.user("hi")], days_quiet=40)
    retention.sweep()
    text = client_of(admin).get("/projects/default/audit?action=session_deleted").content.decode()
    assert "2 events and 2 other rows" in text and "agent bot" in text  # 1 call sighting, 1 ledger row
    assert "1 event" in text and "by retention: 30 days" in text and "<td>retention</td>" in text and "<td>alice</td>" in text
    assert "kept forever → 30 days" in client_of(admin).get("/projects/default/audit?action=retention_changed").content.decode()
