import io
import json

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from sessions_app.management.commands import local_setup
from tests.conftest import ApiClient

pytestmark = pytest.mark.django_db


def run(*args) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def test_create_token_prints_a_working_token_on_the_last_line():
    token = run("create_token", "bot").strip().splitlines()[-1]
    assert ApiClient(token).get("/api/v1/sessions").status_code == 200
    user = get_user_model().objects.get(username="bot")
    assert not user.is_staff and not user.has_perm("sessions_app.recover_session")


def test_create_token_staff_grants_recovery_and_reuses_the_user():
    first = run("create_token", "ops").strip().splitlines()[-1]
    second = run("create_token", "ops", "--staff").strip().splitlines()[-1]
    assert first != second
    user = get_user_model().objects.get(username="ops")
    assert user.is_staff and user.has_perm("sessions_app.recover_session")
    assert ApiClient(first).get("/api/v1/sessions").status_code == 200


def test_local_setup_prints_the_same_working_login_each_time(tmp_path, monkeypatch, client):
    monkeypatch.setattr(local_setup, "CREDENTIALS_FILE", tmp_path / "local-admin.json")
    first = run("local_setup")
    assert run("local_setup") == first
    stored = json.loads((tmp_path / "local-admin.json").read_text())
    assert stored["password"] in first and stored["token"] in first
    assert client.login(username=stored["username"], password=stored["password"])
    assert ApiClient(stored["token"]).get("/api/v1/sessions").status_code == 200
