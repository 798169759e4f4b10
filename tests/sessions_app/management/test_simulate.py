import io
import subprocess
import sys

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.utils import timezone

from sessions_app import services
from sessions_app.lib import demo
from sessions_app.management.commands import simulate
from sessions_app.models import ApiToken, Event, Session, hash_token
from tests.access import token_for
from tests.conftest import ApiClient as DjangoApiClient
from tests.servers import PROJECT_DIR, DaphneServer, free_port
from turnlog_client import Client


def run(*args) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


@pytest.fixture
def daphne_url(transactional_db, tmp_path):
    """A real Daphne serving the project on a free port, on the test database."""
    server = DaphneServer(connection.settings_dict, tmp_path / "daphne.log")
    try:
        yield server.start().url
    finally:
        server.stop()


@pytest.mark.django_db
def test_seed_demo_fills_an_empty_database_with_finished_and_crashed_sessions():
    output = run("seed_demo", "--sessions", "6")
    lines = {line.split()[0]: line for line in output.splitlines()}
    sessions = list(Session.objects.filter(parent=None).order_by("created_at"))
    assert len(sessions) == 6
    fork = Session.objects.get(parent__isnull=False)  # one clean session replayed from its first turn
    assert not fork.parent.interrupted and 0 < fork.seed_length < fork.parent.event_count
    assert f"forked from {fork.parent_id}" in lines[fork.id]
    assert {s.interrupted for s in sessions} == {True, False}
    now = timezone.now()
    for session in sessions:
        events = list(session.events.order_by("seq"))
        assert events and [e.seq for e in events] == list(range(session.event_count))
        assert [e.time for e in events] == sorted(e.time for e in events)
        assert session.created_at == events[0].time and events[-1].time <= now
        assert ("crashed" in lines[session.id]) == session.interrupted
    assert any(e.data.get("surface_op") for e in Event.objects.all())  # a compaction
    assert (now - sessions[0].created_at).total_seconds() > 3600  # spread over the last hours

    assert "skipped" in run("seed_demo")
    assert Session.objects.count() == 7
    assert Event.objects.count() == sum(s.event_count for s in sessions) + fork.event_count


@pytest.mark.django_db
def test_seed_demo_leaves_a_database_with_sessions_alone():
    services.create_session(session_id="mine")
    assert "skipped" in run("seed_demo")
    assert list(Session.objects.values_list("id", flat=True)) == ["mine"]


@pytest.mark.django_db(transaction=True)
def test_simulate_writes_live_sessions_through_the_real_api(daphne_url, agent_user):
    token = token_for(agent_user)
    output = run(
        "simulate", "--sessions", "2", "--duration", "3", "--rate", "50", "--crash-rate", "0.5", "--fork-rate", "1",
        "--url", daphne_url, "--token", token, "--seed", "11",
    )  # fmt: skip

    outcomes, forks = {}, {}
    for line in output.splitlines():
        what, subject = line.split("] ", 1)[1].split()[:2]
        if what in {"finished", "crashed"}:
            outcomes[subject] = what
        elif what == "forked":
            forks[subject] = line
    assert len(outcomes) >= 2, output
    api = Client(daphne_url, token)
    listed = {s["id"]: s for s in api.list_sessions(limit=200)["items"]}
    assert set(listed) == set(outcomes) | set(forks), output
    assert forks and len(forks) == list(outcomes.values()).count("finished")  # every finished session was forked
    for fork_id in forks:
        parent = listed[fork_id]["parent"]
        assert outcomes[parent["session_id"]] == "finished"
        assert parent["seed_length"] == listed[parent["session_id"]]["event_count"] == listed[fork_id]["event_count"]
    for session_id, outcome in outcomes.items():
        session = listed[session_id]
        answer = api.events(session_id, limit=5000)
        assert [e["seq"] for e in answer["events"]] == list(range(session["event_count"]))
        assert session["interrupted"] == (outcome == "crashed")
        scenario = demo.scenario(session["metadata"]["demo_seed"], crash_rate=0.5)
        assert [{"type": e["type"], "data": e["data"]} for e in answer["events"]] == scenario.events


def test_simulate_without_a_server_exits_non_zero_and_says_to_start_one():
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    done = subprocess.run(
        [sys.executable, "manage.py", "simulate", "--url", url, "--token", "unused", "--duration", "1"],
        cwd=PROJECT_DIR, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode != 0
    assert f"cannot reach the Turnlog server at {url}" in done.stderr
    assert "make run" in done.stderr and "make simulate PORT=8123" in done.stderr  # the usual cause: another PORT


@pytest.mark.django_db
def test_simulate_reuses_its_local_token_until_it_is_revoked(tmp_path, monkeypatch):
    monkeypatch.setattr(simulate, "TOKEN_FILE", tmp_path / "var" / "simulator-token")
    first = simulate.Command().local_token()
    assert simulate.Command().local_token() == first
    assert ApiToken.objects.filter(user__username=simulate.SIMULATOR_USERNAME).count() == 1
    assert (tmp_path / "var" / "simulator-token").stat().st_mode & 0o777 == 0o600

    services.revoke_token(token=ApiToken.objects.get())
    second = simulate.Command().local_token()
    assert second != first
    assert ApiToken.objects.usable().get().token_sha256 == hash_token(second)
    assert DjangoApiClient(second).get("/api/v1/sessions").status_code == 200


@pytest.mark.django_db
def test_simulate_replaces_its_local_token_once_it_expires(tmp_path, monkeypatch):
    monkeypatch.setattr(simulate, "TOKEN_FILE", tmp_path / "var" / "simulator-token")
    first = simulate.Command().local_token()
    ApiToken.objects.filter(token_sha256=hash_token(first)).update(expires_at=timezone.now())
    second = simulate.Command().local_token()
    assert second != first and ApiToken.objects.usable().get().token_sha256 == hash_token(second)


@pytest.mark.django_db(transaction=True)
def test_simulate_with_a_refused_token_says_so(daphne_url):
    with pytest.raises(CommandError, match=r"refused the token \(HTTP 401\)"):
        run("simulate", "--url", daphne_url, "--token", "tl_not-a-token", "--duration", "1")
