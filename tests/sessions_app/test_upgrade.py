"""An upgrade from the last released version: a database that Turnlog 0.1.0's own server and client wrote
(tests/fixtures/upgrade-0.1.0.*, made by tests/fixtures/make_upgrade_fixture.py), copied into a new database on
the suite's backend and migrated by today's `manage.py migrate`, answers every read the old API answered (the
API only grows: today's answers hold every old field with its old value), its tokens still authenticate and
append at the next seq, and its users log in with their old passwords."""

from __future__ import annotations

import http.cookiejar
import json
import os
import re
import shutil
import subprocess
import urllib.error
import urllib.parse
import urllib.request

import pytest
from django.db import connection

from sessions_app.management.database_copies import Database
from tests.servers import PROJECT_DIR, TURNLOG, DaphneServer, database_url

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(300)]

FIXTURES = PROJECT_DIR / "tests" / "fixtures"
OLD = "0.1.0"


def manage(*args: str, database: dict) -> subprocess.CompletedProcess:
    """`turnlog manage ARGS` (as the guide and the migration unit run them) on `database`."""
    env = {**os.environ, "DATABASE_URL": database_url(database)}
    return subprocess.run([TURNLOG, "manage", *args], cwd=PROJECT_DIR, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture
def expected() -> dict:
    """What 0.1.0's API answered on this backend when the fixture was made, its tokens and its users' passwords."""
    return json.loads((FIXTURES / f"upgrade-{OLD}.json").read_text())[connection.vendor]


@pytest.fixture
def old_database(tmp_path):
    """A new database on the suite's backend holding the fixture as 0.1.0 left it: the SQLite file copied, or the
    PostgreSQL dump loaded by psql into a database this test creates and drops."""
    if connection.vendor == "sqlite":
        path = tmp_path / "upgraded.sqlite3"
        shutil.copyfile(FIXTURES / f"upgrade-{OLD}.sqlite3", path)
        yield {"ENGINE": "django.db.backends.sqlite3", "NAME": str(path)}
        return
    name = f"upgrade_{os.getpid()}_{os.urandom(3).hex()}"
    with connection.cursor() as cursor:
        cursor.execute(f'CREATE DATABASE "{name}"')
    database = {**connection.settings_dict, "NAME": name}
    try:
        libpq = Database("postgresql", name, database).libpq_environment()
        loaded = subprocess.run(["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", name, "-f", str(FIXTURES / f"upgrade-{OLD}.postgresql.sql")],
                                env={**os.environ, **libpq}, capture_output=True, text=True, timeout=120)  # fmt: skip
        assert loaded.returncode == 0, loaded.stderr
        yield database
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def differences(old, new, where: str = "") -> list[str]:
    """Where `new` lacks or changes something `old` holds: every old field keeps its value, new fields may be added."""
    if isinstance(old, dict) and isinstance(new, dict):
        return [d for key in old for d in (differences(old[key], new[key], f"{where}.{key}") if key in new else [f"{where}.{key}: gone"])]
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [d for i, (o, n) in enumerate(zip(old, new)) for d in differences(o, n, f"{where}[{i}]")]
    return [] if old == new else [f"{where}: {old!r} became {new!r}"]


def api(server: DaphneServer, token: str):
    def request(path, body=None, headers=()):
        data = None if body is None else json.dumps(body).encode()
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json", **dict(headers)}
        sent = urllib.request.Request(server.url + path, data=data, headers=headers)
        try:
            with urllib.request.urlopen(sent, timeout=30) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read())

    return request


def log_in(server: DaphneServer, username: str, password: str) -> str:
    """The login form filled in as a browser does; answers the path the server sends the browser to."""
    browser = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
    form = browser.open(server.url + "/login/", timeout=30).read().decode()
    csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form).group(1)
    body = urllib.parse.urlencode({"csrfmiddlewaretoken": csrf, "username": username, "password": password}).encode()
    with browser.open(urllib.request.Request(server.url + "/login/", data=body, headers={"Referer": server.url + "/login/"}), timeout=30) as answer:
        return urllib.parse.urlsplit(answer.geturl()).path


def test_a_database_written_by_the_last_release_reads_back_after_migrate_and_its_tokens_and_users_still_work(old_database, expected, tmp_path):
    shown = manage("showmigrations", "sessions_app", database=old_database)
    assert shown.returncode == 0, shown.stderr
    assert "[ ]" in shown.stdout  # today's code has migrations 0.1.0 did not: this is an upgrade
    migrated = manage("migrate", "--noinput", database=old_database)  # the migration unit's command
    assert migrated.returncode == 0, migrated.stderr
    assert "Applying sessions_app." in migrated.stdout
    assert "[ ]" not in manage("showmigrations", database=old_database).stdout

    # A token made after the upgrade, as the guide makes one by hand, works beside the old ones.
    created = manage("tokens", "create", "--user", "vera", "--project", "billing", "--name", "after-upgrade", database=old_database)
    assert created.returncode == 0, created.stderr
    new_token = created.stdout.strip().splitlines()[-1]
    # Statuses are read by the server's clock: the open turn is stalled here as it was when the answers were kept.
    stall = str(expected["stall_seconds"])
    server = DaphneServer(old_database, tmp_path / "daphne.log", TURNLOG_STALL_SECONDS=stall).start()
    try:
        read = api(server, expected["tokens"]["reader"])
        old_answers = expected["answers"]
        assert {s["id"] for s in old_answers["/api/v1/sessions?limit=200"]["items"]} == {"crashed", "done", "done-fork", "empty"}
        for path, old in old_answers.items():
            status, new = read(path)
            assert status == 200, (path, status, new)
            assert differences(old, new) == [], path
        assert read("/api/v1/sessions/crashed")[1]["status"] == "stalled"  # 0.1.0 left its turn open

        # The writer's token appends at the next seq; the interrupted turn's owed call gets its result. Before
        # that, 0.1.0's first batch sent again with its Idempotency-Key is answered from 0.1.0's receipt.
        write = api(server, expected["tokens"]["writer"])
        count = old_answers["/api/v1/sessions/crashed"]["event_count"]
        again = write("/api/v1/sessions/crashed/events", {"events": expected["batches"]["first-batch"]}, {"Idempotency-Key": "first-batch"})
        assert again == (201, {"first_seq": 0, "next_seq": count})
        result = {"type": "tool_result", "data": {"tool_call_id": "c1", "name": "tool_c1", "content": "wired", "metadata": {}}}
        assert write("/api/v1/sessions/crashed/events", {"events": [result]}) == (201, {"first_seq": count, "next_seq": count + 1})
        status, events = read("/api/v1/sessions/crashed/events?limit=5000")
        assert events["events"][:count] == old_answers["/api/v1/sessions/crashed/events?limit=5000"]["events"]
        assert events["events"][count]["seq"] == count
        done = old_answers["/api/v1/sessions/done"]["event_count"]
        assert api(server, new_token)("/api/v1/sessions/done/events", {"events": [{"type": "user_message", "data": {"content": "hi"}}]}) == (
            201, {"first_seq": done, "next_seq": done + 1}
        )  # fmt: skip
        # The reader's token keeps its scope: it reads, it does not append.
        assert read("/api/v1/sessions/crashed/events", {"events": [result]})[0] == 403
        assert api(server, expected["tokens"]["writer"][:-2] + "xx")("/api/v1/sessions")[0] == 401

        for username, password in expected["passwords"].items():
            assert log_in(server, username, password) == "/", username
            assert log_in(server, username, password + "!") == "/login/", username
    finally:
        server.stop()

    listed = manage("tokens", "list", "--all", database=old_database)
    assert listed.returncode == 0, listed.stderr
    for name, user in [("writer", "vera"), ("reader", "admin")]:
        assert re.search(rf"\b{user}\b.*\b{name}\b|\b{name}\b.*\b{user}\b", listed.stdout), listed.stdout
    members = manage("projects", "members", "billing", database=old_database)
    assert members.returncode == 0 and "vera" in members.stdout and "admin" in members.stdout, members.stdout + members.stderr
