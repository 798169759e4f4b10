"""The headless first start (TURNLOG_INIT_*; sessions_app/services/first_start.py) as real processes on the
backend the suite runs on: `migrate` applies it once and prints no secret; the admin logs in with the password
from the file and the token appends; a second migrate changes nothing and says so; two at once apply it once;
a wrong variable is an error naming it; and when it is set, no random `admin` is made."""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys
import threading

import pytest
from django.core.management import call_command
from django.db import connection

from sessions_app.models import ApiToken, AuditEntry, Membership, Project, hash_token
from tests.conftest import ApiClient
from tests.servers import PROJECT_DIR, TURNLOG, database_url
from tests.sessions_app import factories as f
from tests.sessions_app.api.http import append, make_session
from tests.guide_commands import guide_commands

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]

PASSWORD = "correct horse battery staple"


def new_token() -> str:
    return "tl_" + secrets.token_urlsafe(32)


@pytest.fixture
def init(tmp_path) -> dict[str, str]:
    """The TURNLOG_INIT_* variables of a first start, its password in a file."""
    password_file = tmp_path / "admin-password"
    password_file.write_text(PASSWORD + "\n")
    return {
        "TURNLOG_INIT_ADMIN_USERNAME": "ops",
        "TURNLOG_INIT_ADMIN_PASSWORD_FILE": str(password_file),
        "TURNLOG_INIT_PROJECT": "team",
        "TURNLOG_INIT_TOKEN": new_token(),
        "TURNLOG_INIT_TOKEN_SCOPES": "read,append",
    }


def run(command: list, database: dict, **env: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "TURNLOG_CONFIG": "", "DATABASE_URL": database_url(database), **env}
    return subprocess.run(command, cwd=PROJECT_DIR, env=env, capture_output=True, text=True, timeout=150)


def migrate(database: dict, **env: str) -> subprocess.CompletedProcess:
    return run([sys.executable, "manage.py", "migrate", "--noinput"], database, **env)


def logs_in(password: str) -> bool:
    from django.test import Client

    return Client().post("/login/", {"username": "ops", "password": password}).status_code == 302


def test_migrate_applies_the_first_start_once_the_admin_logs_in_and_the_token_appends(init, tmp_path):
    first = migrate(connection.settings_dict, **init)
    assert first.returncode == 0, first.stderr
    output = first.stdout + first.stderr
    assert "created the admin 'ops'" in output and "created the project 'team'" in output
    assert f"issued the token {init['TURNLOG_INIT_TOKEN'][:10]}..." in output and "scopes append, read" in output
    assert PASSWORD not in output and init["TURNLOG_INIT_TOKEN"] not in output
    assert connection.settings_dict["NAME"] in output  # which database it wrote

    assert logs_in(PASSWORD)
    api = ApiClient(init["TURNLOG_INIT_TOKEN"])
    make_session(api, "first")
    assert (answer := append(api, "first", [f.user("hello")])).status_code == 201, answer.content
    assert api.get("/api/v1/sessions/first").json()["project"] == "team"

    # A second start, the password file changed meanwhile: nothing is reset, nothing added.
    (tmp_path / "admin-password").write_text("another password entirely\n")
    counts = [model.objects.count() for model in (ApiToken, Membership, Project, AuditEntry)]
    second = migrate(connection.settings_dict, **init)
    assert second.returncode == 0, second.stderr
    assert "the user 'ops' exists: left as it is, its password not reset" in second.stdout
    assert "found the project 'team'" in second.stdout and "exists (active, in 'team'): not issued again" in second.stdout
    assert "another password" not in second.stdout + second.stderr and init["TURNLOG_INIT_TOKEN"] not in second.stdout
    assert [model.objects.count() for model in (ApiToken, Membership, Project, AuditEntry)] == counts
    assert logs_in(PASSWORD) and not logs_in("another password entirely")


def test_a_new_database_gets_the_first_start_with_its_migrations_through_turnlog_manage(init, tmp_path):
    if connection.vendor == "sqlite":
        database = {"ENGINE": connection.settings_dict["ENGINE"], "NAME": str(tmp_path / "new.sqlite3")}
    else:
        name = f"first_start_{os.getpid()}_{os.urandom(3).hex()}"
        with connection.cursor() as cursor:
            cursor.execute(f'CREATE DATABASE "{name}"')
        database = {**connection.settings_dict, "NAME": name}
    try:
        made = run([TURNLOG, "manage", "migrate", "--noinput"], database, **init)
        assert made.returncode == 0, made.stderr
        assert "Applying sessions_app.0001_initial... OK" in made.stdout and "created the admin 'ops'" in made.stdout
        assert PASSWORD not in made.stdout + made.stderr and init["TURNLOG_INIT_TOKEN"] not in made.stdout + made.stderr
        listed = run([TURNLOG, "manage", "tokens", "list"], database)
        assert listed.returncode == 0, listed.stderr
        row = next(line for line in listed.stdout.splitlines() if init["TURNLOG_INIT_TOKEN"][:10] in line)
        assert re.split(r"\s{2,}", row)[2:6] == ["first start (TURNLOG_INIT_TOKEN)", "ops", "team", "append,read"], row
    finally:
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute(f'DROP DATABASE IF EXISTS "{database["NAME"]}" WITH (FORCE)')


def test_two_first_starts_at_once_apply_it_once(init):
    outputs: list[subprocess.CompletedProcess] = []
    command = [sys.executable, "manage.py", "first_start"]
    threads = [threading.Thread(target=lambda: outputs.append(run(command, connection.settings_dict, **init))) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [result.returncode for result in outputs] == [0, 0], [result.stderr for result in outputs]
    said = sorted("created the admin" in result.stdout for result in outputs)
    assert said == [False, True], [result.stdout for result in outputs]
    assert ApiToken.objects.filter(token_sha256=hash_token(init["TURNLOG_INIT_TOKEN"])).count() == 1
    assert Membership.objects.filter(user__username="ops", project__slug="team").count() == 1


@pytest.mark.parametrize(
    ("change", "named", "said"),
    [
        ({"TURNLOG_INIT_TOKEN": "tl_tooshort"}, "TURNLOG_INIT_TOKEN", "is not a Turnlog token (11 characters)"),
        ({"TURNLOG_INIT_TOKEN": "xx_" + secrets.token_urlsafe(32)}, "TURNLOG_INIT_TOKEN", "it must be tl_ and 43 characters"),
        ({"TURNLOG_INIT_TOKEN_SCOPES": "read,apend"}, "TURNLOG_INIT_TOKEN_SCOPES", "unknown 'apend'"),
        ({"TURNLOG_INIT_TOKEN_SCOPES": "metrics"}, "TURNLOG_INIT_TOKEN_SCOPES", "metrics is a site token's scope"),
        ({"TURNLOG_INIT_ADMIN_PASSWORD_FILE": "/nonexistent/admin-password"}, "TURNLOG_INIT_ADMIN_PASSWORD_FILE", "/nonexistent/admin-password, which does not exist"),
        ({"TURNLOG_INIT_ADMIN_PASSWORD_FILE": ""}, "TURNLOG_INIT_ADMIN_PASSWORD_FILE", "is not set"),
        ({"TURNLOG_INIT_ADMIN_USERNAME": ""}, "TURNLOG_INIT_ADMIN_USERNAME", "is not set"),
        ({"TURNLOG_INIT_PROJECT": "no spaces please"}, "TURNLOG_INIT_PROJECT", "a project's slug is"),
    ],
)  # fmt: skip
def test_a_wrong_variable_stops_migrate_naming_it_and_changes_nothing(init, change, named, said):
    result = migrate(connection.settings_dict, **{**init, **change})
    assert result.returncode == 1
    assert named in result.stderr and said in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert change.get("TURNLOG_INIT_TOKEN", init["TURNLOG_INIT_TOKEN"]) not in result.stdout + result.stderr
    assert not ApiToken.objects.exists() and not Project.objects.filter(slug="team").exists()


def test_a_wrong_variable_stops_migrate_on_a_new_database_before_any_migration(init, tmp_path):
    database = {"ENGINE": "django.db.backends.sqlite3", "NAME": str(tmp_path / "new.sqlite3")}
    result = migrate(database, **{**init, "TURNLOG_INIT_TOKEN_SCOPES": "everything"})
    assert result.returncode == 1 and "TURNLOG_INIT_TOKEN_SCOPES: unknown 'everything'" in result.stderr
    assert "Applying" not in result.stdout


def test_a_weak_password_is_refused_naming_the_file(init, tmp_path):
    (tmp_path / "admin-password").write_text("ops\n")
    result = run([sys.executable, "manage.py", "first_start"], connection.settings_dict, **init)
    assert result.returncode == 1
    assert "TURNLOG_INIT_ADMIN_PASSWORD_FILE: the password in" in result.stderr and "ops\n" not in result.stdout


def test_with_a_first_start_admin_local_setup_makes_no_random_admin_and_prints_no_secret(init, monkeypatch, capsys, django_user_model):
    for name, value in init.items():
        monkeypatch.setenv(name, value)
    call_command("local_setup")
    out = capsys.readouterr().out
    assert not django_user_model.objects.filter(username="admin").exists()
    assert "log in as:  ops, with the password in" in out and "tl_" not in out
    assert not ApiToken.objects.exists()


def test_the_guides_first_start_commands_run_as_written(init):
    ran = []

    def turnlog(command: str) -> subprocess.CompletedProcess:
        ran.append(command)
        done = run([TURNLOG, *command.split()[1:]], connection.settings_dict, **init)
        assert done.returncode == 0, (command, done.stdout, done.stderr)
        return done

    assert "created the admin 'ops'" in turnlog("turnlog manage migrate").stdout  # what the migration unit runs
    assert "not issued again" in turnlog("turnlog manage first_start").stdout
    assert init["TURNLOG_INIT_TOKEN"][:10] in turnlog("turnlog manage tokens list").stdout
    documented = guide_commands("turnlog", sections=("First start",))
    assert "turnlog manage first_start" in documented
    # `turnlog serve` is run by tests/dashboard/test_cli.py.
    assert set(documented) - {"turnlog serve"} <= set(ran), sorted(set(documented) - set(ran))
