import io

import pytest
from django.core.management import call_command
from django.http import HttpRequest
from django.test import Client

from sessions_app import services
from sessions_app.log import events as log_events
from sessions_app.models import ApiToken, Event, RecoveryRecord, Session, ToolPolicy
from tests.sessions_app import factories

pytestmark = pytest.mark.django_db

LOG_MODELS = ["session", "event", "recoveryrecord"]


@pytest.fixture
def logs(django_user_model):
    """A crashed session, recovered: one row of every log model."""
    services.create_session(session_id="crashed", agent_name="billing-bot")
    services.append_events(session_id="crashed", events=log_events.validate_batch(factories.worked_example()))
    services.recover(session_id="crashed", user=django_user_model.objects.create_user("someone"))
    ToolPolicy.objects.create(pattern="send_*", side_effect=ToolPolicy.EXTERNAL_EFFECT)
    return Session.objects.get(id="crashed")


def logged_in(django_user_model, username: str, *options: str) -> Client:
    """A user made the way the README says: `create_token USERNAME [--staff]`, then a password."""
    call_command("create_token", username, *options, stdout=io.StringIO(), stderr=io.StringIO())
    user = django_user_model.objects.get(username=username)
    user.set_password("pw")
    user.save()
    client = Client()
    # A request: django-axes counts logins per client address.
    assert client.login(request=HttpRequest(), username=username, password="pw")
    return client


def object_pages(session: Session) -> dict[str, str]:
    """One change (or view) page of each model."""
    return {
        "session": f"/admin/sessions_app/session/{session.pk}/change/",
        "event": f"/admin/sessions_app/event/{Event.objects.filter(session=session).first().pk}/change/",
        "recoveryrecord": f"/admin/sessions_app/recoveryrecord/{RecoveryRecord.objects.get().pk}/change/",
        "toolpolicy": f"/admin/sessions_app/toolpolicy/{ToolPolicy.objects.get().pk}/change/",
    }


def test_a_staff_operator_sees_every_log_and_policy_page_and_edits_policies(logs, django_user_model):
    client = logged_in(django_user_model, "ops", "--staff")
    index = client.get("/admin/")
    assert index.status_code == 200
    for model in [*LOG_MODELS, "toolpolicy"]:
        assert f'href="/admin/sessions_app/{model}/"' in index.content.decode()
        assert client.get(f"/admin/sessions_app/{model}/").status_code == 200, model
    for model, page in object_pages(logs).items():
        assert client.get(page).status_code == 200, model
    assert client.get("/admin/sessions_app/toolpolicy/add/").status_code == 200
    response = client.post(
        "/admin/sessions_app/toolpolicy/add/", {"pattern": "lookup_*", "side_effect": ToolPolicy.READ_ONLY, "note": ""}
    )
    assert response.status_code == 302 and ToolPolicy.objects.filter(pattern="lookup_*").exists()


def test_logs_stay_read_only_for_staff(logs, django_user_model):
    client = logged_in(django_user_model, "ops", "--staff")
    event = Event.objects.filter(session=logs).first()
    for model in LOG_MODELS:
        assert client.get(f"/admin/sessions_app/{model}/add/").status_code == 403, model
    assert client.post(f"/admin/sessions_app/event/{event.pk}/delete/", {"post": "yes"}).status_code == 403
    assert client.post(f"/admin/sessions_app/session/{logs.pk}/change/", {"agent_name": "x"}).status_code == 403
    assert Event.objects.filter(pk=event.pk).exists() and Session.objects.get().agent_name == "billing-bot"
    page = client.get(f"/admin/sessions_app/event/{event.pk}/change/").content.decode()
    assert 'name="_save"' not in page


def test_staff_without_policy_permissions_reads_policies_but_cannot_edit_them(logs, django_user_model):
    client = logged_in(django_user_model, "viewer-ops")
    django_user_model.objects.filter(username="viewer-ops").update(is_staff=True)
    assert client.get("/admin/sessions_app/toolpolicy/").status_code == 200
    policy = ToolPolicy.objects.get()
    assert client.get(f"/admin/sessions_app/toolpolicy/{policy.pk}/change/").status_code == 200
    assert client.get("/admin/sessions_app/toolpolicy/add/").status_code == 403
    client.post(f"/admin/sessions_app/toolpolicy/{policy.pk}/change/", {"pattern": "send_*", "side_effect": "read_only"})
    assert ToolPolicy.objects.get().side_effect == ToolPolicy.EXTERNAL_EFFECT


def test_api_tokens_are_shown_to_superusers_only(logs, django_user_model):
    operator = logged_in(django_user_model, "ops", "--staff")
    assert operator.get("/admin/sessions_app/apitoken/").status_code == 403
    assert "/admin/sessions_app/apitoken/" not in operator.get("/admin/").content.decode()
    admin = Client()
    admin.force_login(django_user_model.objects.create_superuser("root", password="pw"))
    assert admin.get("/admin/sessions_app/apitoken/").status_code == 200
    assert ApiToken.objects.count() == 1


def test_a_user_who_is_not_staff_cannot_open_the_admin(logs, django_user_model):
    client = logged_in(django_user_model, "bot")
    for model in [*LOG_MODELS, "toolpolicy"]:
        assert client.get(f"/admin/sessions_app/{model}/").status_code == 302  # to the admin login
