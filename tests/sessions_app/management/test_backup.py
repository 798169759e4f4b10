"""`manage.py backup` and `restore` (and `turnlog backup`/`restore`) as real processes, on the backend the suite
runs on: a backup of a database written through the API, restored into a new empty database, answers every
read as the original does and takes the next append at the next seq; a restore never touches a database that
holds anything; a backup file is 0600 whatever the umask, and an existing one is kept unless --force."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import quote

import pytest
from django.db import connection

from sessions_app.models import Role
from sessions_app.management.database_copies import Database
from tests.access import token_for
from tests.conftest import ApiClient
from tests.guide_commands import guide_commands
from tests.servers import PROJECT_DIR, TURNLOG, DaphneServer, database_url
from tests.sessions_app import factories as f
from tests.sessions_app.api.http import append, make_session

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]

GUIDE_BACKUPS = "/var/backups/turnlog"  # the guide's backup directory, a temporary one here


def run(command: list, database: dict, *, umask: int | None = None, **env: str) -> subprocess.CompletedProcess:
    """A command as its own process, on `database` (a Django database's settings) through DATABASE_URL."""
    env = {**os.environ, "DATABASE_URL": database_url(database), **env}
    set_umask = None if umask is None else (lambda: os.umask(umask))
    return subprocess.run(command, cwd=PROJECT_DIR, env=env, capture_output=True, text=True, timeout=120, preexec_fn=set_umask)


def manage(*args: str, database: dict, umask: int | None = None) -> subprocess.CompletedProcess:
    return run([sys.executable, "manage.py", *args], database, umask=umask)


@pytest.fixture
def source() -> dict:
    """The test database, which the test writes through the API."""
    return connection.settings_dict


@pytest.fixture
def new_database(tmp_path, source):
    """Makes new empty databases on the suite's backend: a SQLite file not yet made, or a PostgreSQL database
    this test creates and drops."""
    made = []

    def new(name: str) -> dict:
        if connection.vendor == "sqlite":
            return {"ENGINE": source["ENGINE"], "NAME": str(tmp_path / f"{name}.sqlite3")}
        made.append(f"{name}_{os.getpid()}_{os.urandom(3).hex()}")
        with connection.cursor() as cursor:
            cursor.execute(f'CREATE DATABASE "{made[-1]}"')
        return {**source, "NAME": made[-1]}

    yield new
    for name in made:
        with connection.cursor() as cursor:
            cursor.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def empty_database(new_database) -> dict:
    return new_database("restored")


@pytest.fixture
def written(django_user_model) -> dict:
    """Sessions, events, a fork, a note and a verdict, written through the API; the operator's token reads them."""
    ops = ApiClient(token_for(django_user_model.objects.create_user("vera", is_staff=True), role=Role.OPERATOR))
    make_session(ops, "crashed", agent_name="payer", metadata={"team": "billing"})
    crashed = [f.user("pay the invoice"), f.event("turn_start", turn=1), f.event("step_start", turn=1, step=1)]
    crashed += [f.assistant(calls=["c1", "c2"]), f.tool_call("c1"), f.tool_call("c2"), f.tool_result("c2", "sent")]
    assert append(ops, "crashed", crashed, headers={"Idempotency-Key": "first-batch"}).status_code == 201
    make_session(ops, "done", agent_name="helper")
    done = [f.user(), f.event("turn_start", turn=1), f.event("step_start", turn=1, step=1), f.assistant("hello")]
    done += [f.event("step_end", turn=1, step=1, outcome="ok"), f.event("turn_end", turn=1, reason="complete")]
    assert (answer := append(ops, "done", done)).status_code == 201, answer.content
    assert (answer := ops.post("/api/v1/sessions/done/fork", {"boundary": "last", "id": "done-fork"})).status_code == 201, answer.content
    note = ops.post("/api/v1/sessions/crashed/notes", {"text": "customer called about it", "tags": ["billing"], "seq": 3})
    assert note.status_code == 201, note.content
    verdict = ops.client.put(
        "/api/v1/sessions/crashed/calls/c1/verdict",
        json.dumps({"outcome": "happened", "evidence": "the bank portal shows the wire", "external_ref": "W-1"}),
        content_type="application/json", headers=ops.headers,
    )  # fmt: skip
    assert verdict.status_code == 200, verdict.content
    return {"client": ops, "token": ops.headers["Authorization"].removeprefix("Bearer "), "batch": crashed}


def answers(get) -> dict[str, object]:
    """Every read of every session, by path: the list, each session, its events, messages, calls, notes and
    each call's verdicts. `get(path)` answers (status, JSON)."""
    read: dict[str, object] = {}

    def keep(path: str):
        status, body = get(path)
        assert status == 200, (path, status, body)
        read[path] = body
        return body

    listed = keep("/api/v1/sessions?limit=200")
    assert listed["next_cursor"] is None
    for session in listed["items"]:
        base = f"/api/v1/sessions/{quote(session['id'], safe='')}"
        for part in ["", "/events?limit=5000", "/messages", "/notes", "/recovery-plan"]:
            keep(base + part)
        for call in keep(base + "/calls?all=true")["calls"]:
            keep(f"{base}/calls/{quote(call['call_id'], safe='')}/verdicts")
    return read


def in_process(client: ApiClient):
    def get(path):
        response = client.client.get(path, headers=client.headers)
        return response.status_code, response.json()

    return get


def over_http(server: DaphneServer, token: str):
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


def test_a_restored_backup_answers_every_read_as_the_original_and_appends_at_the_next_seq(written, source, empty_database, tmp_path):
    original = answers(in_process(written["client"]))
    assert {body["id"] for body in original["/api/v1/sessions?limit=200"]["items"]} == {"crashed", "done", "done-fork"}
    assert original["/api/v1/sessions/crashed/notes"]["notes"] and original["/api/v1/sessions/crashed/calls/c1/verdicts"]["verdicts"]

    backup = tmp_path / "turnlog.backup"
    made = manage("backup", str(backup), database=source)
    assert made.returncode == 0, made.stderr
    source_name = str(Path(source["NAME"]).resolve()) if connection.vendor == "sqlite" else source["NAME"]
    assert source_name in made.stdout and str(backup) in made.stdout
    restored = manage("restore", str(backup), database=empty_database)
    assert restored.returncode == 0, restored.stderr
    assert empty_database["NAME"] in restored.stdout and "predates" not in restored.stdout
    assert not source.get("PASSWORD") or source["PASSWORD"] not in restored.stdout

    server = DaphneServer(empty_database, tmp_path / "daphne.log").start()
    try:
        request = over_http(server, written["token"])  # the token authenticates: its hash was restored
        assert answers(request) == original
        # The append's receipt was restored too: the same batch again is the first one's answer, stored once.
        first = original["/api/v1/sessions/crashed/events?limit=5000"]
        status, replayed = request("/api/v1/sessions/crashed/events", {"events": written["batch"]}, {"Idempotency-Key": "first-batch"})
        assert (status, replayed) == (201, {"first_seq": 0, "next_seq": first["next_seq"]})
        status, appended = request("/api/v1/sessions/crashed/events", {"events": [f.tool_result("c1", "wired")]})
        assert (status, appended) == (201, {"first_seq": first["next_seq"], "next_seq": first["next_seq"] + 1})
        status, events = request("/api/v1/sessions/crashed/events?limit=5000")
        assert events["events"][:-1] == first["events"] and events["events"][-1]["seq"] == first["next_seq"]
    finally:
        server.stop()
    # The original never saw the restored database's append.
    assert in_process(written["client"])("/api/v1/sessions/crashed/events?limit=5000")[1] == first


def test_a_backup_taken_while_a_server_appends_is_a_consistent_snapshot(written, source, empty_database, tmp_path):
    """Appends go on through a Daphne on the source during the backup: the restored log is a prefix of the
    source's, every session's counts agree with its events, and the log continues from there."""
    server = DaphneServer(source, tmp_path / "source.log").start()
    request = over_http(server, written["token"])
    stop, answered = threading.Event(), []

    def keep_appending():
        while not stop.is_set():
            answered.append(request("/api/v1/sessions/done/events", {"events": [f.user(str(len(answered)))]})[0])

    appender = threading.Thread(target=keep_appending)
    appender.start()
    try:
        while len(answered) < 5:
            assert appender.is_alive()
            threading.Event().wait(0.05)
        backup = tmp_path / "live.backup"
        made = manage("backup", str(backup), database=source)
        during = len(answered)
        threading.Event().wait(0.5)
    finally:
        stop.set()
        appender.join(timeout=60)
    final = request("/api/v1/sessions/done/events?limit=5000")[1]["events"]
    server.stop()
    assert made.returncode == 0, made.stderr
    assert set(answered) == {201} and len(answered) > during  # the server kept appending through the backup
    assert manage("restore", str(backup), database=empty_database).returncode == 0

    restored = DaphneServer(empty_database, tmp_path / "restored.log").start()
    try:
        request = over_http(restored, written["token"])
        events = request("/api/v1/sessions/done/events?limit=5000")[1]
        session = request("/api/v1/sessions/done")[1]
        assert 6 + 5 <= len(events["events"]) < len(final)  # some of the appends, not all of them
        assert events["events"] == final[: len(events["events"])]
        assert session["event_count"] == events["next_seq"] == len(events["events"])
        status, appended = request("/api/v1/sessions/done/events", {"events": [f.user("after")]})
        assert (status, appended["first_seq"]) == (201, events["next_seq"])
    finally:
        restored.stop()


def test_a_restore_into_a_database_that_holds_anything_is_refused_and_changes_nothing(written, source, empty_database, tmp_path):
    backup = tmp_path / "turnlog.backup"
    assert manage("backup", str(backup), database=source).returncode == 0
    before = answers(in_process(written["client"]))
    refused = manage("restore", str(backup), database=source)
    assert refused.returncode != 0
    assert "refusing to restore into" in refused.stderr and "not empty" in refused.stderr and "nothing was changed" in refused.stderr
    assert source["NAME"].rsplit("/", 1)[-1] in refused.stderr, refused.stderr
    assert answers(in_process(written["client"])) == before

    # A database with one migration applied and nothing else written holds rows already (its migrations'): refused.
    migrated = manage("migrate", "sessions_app", "0001", database=empty_database)
    assert migrated.returncode == 0, migrated.stderr
    refused = manage("restore", str(backup), database=empty_database)
    assert refused.returncode != 0 and "not empty" in refused.stderr, refused.stderr
    shown = manage("showmigrations", "sessions_app", database=empty_database)
    assert shown.stdout.count("[X]") == 1, shown.stdout


def test_a_backup_file_is_private_whatever_the_umask_and_is_replaced_only_with_force(written, source, tmp_path):
    backup = tmp_path / "turnlog.backup"
    made = manage("backup", str(backup), database=source, umask=0)
    assert made.returncode == 0, made.stderr
    assert stat.S_IMODE(backup.stat().st_mode) == 0o600
    first = backup.read_bytes()

    backup.write_bytes(b"an older backup")
    backup.chmod(0o644)
    kept = manage("backup", str(backup), database=source, umask=0)
    assert kept.returncode != 0 and "--force" in kept.stderr and str(backup) in kept.stderr
    assert backup.read_bytes() == b"an older backup"

    replaced = manage("backup", "--force", str(backup), database=source, umask=0)
    assert replaced.returncode == 0, replaced.stderr
    assert stat.S_IMODE(backup.stat().st_mode) == 0o600
    assert backup.read_bytes()[:16] == first[:16]  # the file format's header: a whole backup again
    assert sorted(p.name for p in tmp_path.iterdir()) == ["turnlog.backup"]  # no partial file left behind


def test_a_restore_refuses_a_file_that_is_no_backup_or_the_other_backend_s(source, empty_database, tmp_path):
    junk = tmp_path / "notes.txt"
    junk.write_text("not a backup")
    refused = manage("restore", str(junk), database=empty_database)
    assert refused.returncode != 0 and "is not a Turnlog backup" in refused.stderr
    other = tmp_path / "other.backup"
    other.write_bytes(b"PGDMP\x01\x0e" if connection.vendor == "sqlite" else b"SQLite format 3\x00" + bytes(84))
    refused = manage("restore", str(other), database=empty_database)
    assert refused.returncode != 0 and "backup and this Turnlog uses" in refused.stderr, refused.stderr
    assert manage("restore", str(tmp_path / "missing.backup"), database=empty_database).returncode != 0
    if connection.vendor == "sqlite":
        assert not Path(empty_database["NAME"]).exists()


def test_a_backup_of_a_missing_sqlite_file_creates_nothing(tmp_path):
    if connection.vendor != "sqlite":
        pytest.skip("a SQLite file's absence")
    missing = {"ENGINE": "django.db.backends.sqlite3", "NAME": str(tmp_path / "none.sqlite3")}
    refused = manage("backup", str(tmp_path / "x.backup"), database=missing)
    assert refused.returncode != 0 and f"no SQLite database at {missing['NAME']}" in refused.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_the_guide_s_backup_restore_and_upgrade_commands_run_as_written(written, source, new_database, tmp_path):
    """An operator's round: back up the running database, restore it into a new one, upgrade (a backup, migrate,
    collectstatic), roll back by restoring that backup. Every `turnlog` command of the guide's sections is one of
    these, with the guide's backup directory a temporary one here."""
    ran = []

    def turnlog(command: str, database: dict, *, succeeds: bool = True, **env: str) -> subprocess.CompletedProcess:
        ran.append(command)
        done = run([TURNLOG, *command.replace(GUIDE_BACKUPS, str(tmp_path)).split()[1:]], database, **env)
        assert (done.returncode == 0) == succeeds, (command, done.stdout, done.stderr)
        return done

    restored, rolled_back = new_database("restored"), new_database("rolled_back")
    turnlog(f"turnlog backup {GUIDE_BACKUPS}/turnlog.backup", source)
    turnlog(f"turnlog backup {GUIDE_BACKUPS}/turnlog.backup", source, succeeds=False)
    turnlog(f"turnlog backup --force {GUIDE_BACKUPS}/turnlog.backup", source)
    turnlog(f"turnlog restore {GUIDE_BACKUPS}/turnlog.backup", restored)
    turnlog(f"turnlog backup {GUIDE_BACKUPS}/before-upgrade.backup", restored)
    turnlog("turnlog manage migrate", restored)
    turnlog("turnlog manage showmigrations", restored)
    turnlog("turnlog manage collectstatic --noinput", restored, TURNLOG_DATA_DIR=str(tmp_path / "data"))
    assert (tmp_path / "data" / "static").is_dir()
    turnlog(f"turnlog restore {GUIDE_BACKUPS}/before-upgrade.backup", restored, succeeds=False)  # not empty
    done = turnlog(f"turnlog restore {GUIDE_BACKUPS}/before-upgrade.backup", rolled_back)
    assert rolled_back["NAME"] in done.stdout
    assert stat.S_IMODE((tmp_path / "before-upgrade.backup").stat().st_mode) == 0o600
    documented = guide_commands("turnlog", "pg_dump", "pg_restore", sections=("Backup and restore", "Upgrading"))
    assert "turnlog manage migrate" in documented and f"turnlog restore {GUIDE_BACKUPS}/before-upgrade.backup" in documented
    # `turnlog serve` (stopped before a restore on one machine) is run by tests/dashboard/test_cli.py.
    assert set(documented) - {"turnlog serve"} <= set(ran), sorted(set(documented) - set(ran))


def test_a_postgresql_database_is_named_without_its_password_which_only_pg_dump_s_environment_carries():
    options = {"sslmode": "require", "pool": {}}
    database = Database("postgresql", "turnlog", {"HOST": "db", "PORT": 5432, "USER": "turnlog", "PASSWORD": "s3cret", "OPTIONS": options})
    assert str(database) == "the PostgreSQL database turnlog on db:5432, user turnlog"
    env = database.libpq_environment()
    assert (env["PGHOST"], env["PGPORT"], env["PGUSER"], env["PGPASSWORD"], env["PGSSLMODE"]) == ("db", "5432", "turnlog", "s3cret", "require")
    assert str(Database("sqlite", "/var/lib/turnlog/turnlog.sqlite3", {})) == "the SQLite database /var/lib/turnlog/turnlog.sqlite3"
