import io
import re
import subprocess

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.http import HttpRequest

from sessions_app import services
from sessions_app.models import ApiToken, AuditEntry, Membership, Project, Role, hash_token
from tests.conftest import ApiClient

pytestmark = pytest.mark.django_db


def run(*args) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def token_row(secret: str) -> ApiToken:
    return ApiToken.objects.get(token_sha256=hash_token(secret))


def test_create_token_prints_a_working_member_token_on_the_last_line():
    token = run("create_token", "bot").strip().splitlines()[-1]
    assert ApiClient(token).get("/api/v1/sessions").status_code == 200
    user = get_user_model().objects.get(username="bot")
    assert not user.is_staff and not user.has_usable_password()
    assert Membership.objects.get(user=user).project == Project.default()
    assert Membership.objects.get(user=user).role == Role.MEMBER
    row = token_row(token)
    assert (row.project, row.scopes, row.name) == (Project.default(), ["append", "fork", "read"], "create_token")
    created = AuditEntry.objects.get(action=AuditEntry.TOKEN_CREATED)
    assert (created.actor, created.actor_name, created.target) == (None, "cli", row.prefix)


def test_create_token_staff_makes_an_operator_who_recovers_and_edits_tool_policies():
    first = run("create_token", "ops").strip().splitlines()[-1]
    second = run("create_token", "ops", "--staff").strip().splitlines()[-1]
    assert first != second
    user = get_user_model().objects.get(username="ops")
    assert user.is_staff and Membership.objects.get(user=user).role == Role.OPERATOR
    assert token_row(second).scopes == ["append", "fork", "read", "recover"]
    assert token_row(first).scopes == ["append", "fork", "read"]  # the older token keeps its scopes
    assert user.has_perm("sessions_app.change_toolpolicy") and user.has_perm("sessions_app.add_toolpolicy")
    assert ApiClient(first).get("/api/v1/sessions").status_code == 200


def test_create_token_never_lowers_a_role():
    admin = get_user_model().objects.create_user("boss")
    services.set_membership(project=Project.default(), user=admin, role=Role.ADMIN)
    token = run("create_token", "boss").strip().splitlines()[-1]
    assert Membership.objects.get(user=admin).role == Role.ADMIN
    assert token_row(token).scopes == ["append", "fork", "read"]  # as documented: a member's scopes


def test_create_token_staff_says_how_to_give_the_user_a_password():
    err = io.StringIO()
    call_command("create_token", "ops", "--staff", stdout=io.StringIO(), stderr=err)
    assert "manage.py changepassword ops" in err.getvalue()


def first_login(output: str) -> tuple[str, str, str]:
    """The username, password and token the first start printed."""
    username, password = re.search(r"log in as: +(\S+) / (\S+)", output).groups()
    return username, password, re.search(r"API token: +(\S+)", output).group(1)


def test_local_setup_prints_a_working_login_and_token_on_the_first_start(client):
    username, password, token = first_login(run("local_setup"))
    # A request: django-axes counts logins per client address.
    assert client.login(request=HttpRequest(), username=username, password=password)
    assert ApiClient(token).get("/api/v1/sessions").status_code == 200
    # `make run`'s admin administers the default project (not only as a superuser), with a token that may recover.
    assert Membership.objects.get(user__username=username).role == Role.ADMIN
    row = token_row(token)
    assert row.project == Project.default() and "recover" in row.scopes


def test_local_setup_later_starts_keep_a_changed_password_and_mint_no_token(client):
    username, password, token = first_login(run("local_setup"))
    admin = get_user_model().objects.get(username=username)
    admin.set_password("changed by its owner")
    admin.save()
    later = run("local_setup")
    assert password not in later and token not in later and "API token:" not in later
    assert "unchanged" in later and "manage.py tokens create --user admin --project default" in later and "/account/" in later
    assert run("local_setup") == later
    assert client.login(request=HttpRequest(), username=username, password="changed by its owner")
    assert ApiToken.objects.count() == 1 and ApiClient(token).get("/api/v1/sessions").status_code == 200
    assert get_user_model().objects.count() == 1 and Membership.objects.count() == 1


def test_local_setup_names_the_command_it_was_started_by():
    run("local_setup")
    later = run("local_setup", "--manage-command", "turnlog manage")  # as `turnlog serve` runs it
    assert "turnlog manage changepassword admin" in later and "turnlog manage tokens create --user admin" in later
    assert "manage.py" not in later


def test_local_setup_prints_the_address_actually_served():
    output = run("local_setup", "--host", "127.0.0.1", "--port", "8123")
    assert "Turnlog is starting on http://127.0.0.1:8123\n" in output
    assert "http://127.0.0.1:8123/api/v1/sessions" in output
    assert ":8000" not in output
    assert "http://[::1]:9000/account/" in run("local_setup", "--host", "::1", "--port", "9000")  # a later start
    assert "starting on http://127.0.0.1:8001\n" in run("local_setup", "--host", "0.0.0.0", "--port", "8001")


def test_local_setup_prints_the_address_it_is_given_behind_nginx():
    output = run("local_setup", "--url", "https://127.0.0.1:8443/")  # as make run-scaleout runs it
    assert "Turnlog is starting on https://127.0.0.1:8443\n" in output
    assert "https://127.0.0.1:8443/api/v1/sessions" in output and "http://" not in output


def test_make_run_passes_host_and_port_to_the_printed_address_and_the_server():
    dry_run = subprocess.run(
        ["make", "--dry-run", "run", "HOST=127.0.0.2", "PORT=8123"],
        cwd=settings.BASE_DIR, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert "manage.py local_setup --host 127.0.0.2 --port 8123\n" in dry_run
    assert "manage.py runserver 127.0.0.2:8123\n" in dry_run
