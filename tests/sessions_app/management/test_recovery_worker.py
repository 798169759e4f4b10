"""`manage.py recovery_worker`: one round with --once, the loop, a database outage, SIGTERM, two workers at once,
the search index between rounds, webhooks sent (two worker processes: one alert)."""

from __future__ import annotations

import io
import signal
import subprocess
import sys
import time
from datetime import timedelta
from unittest import mock

import pytest
from django.core.management import CommandError, call_command
from django.db import OperationalError, connection
from django.utils import timezone

from sessions_app import services, worker
from sessions_app.log.events import validate_batch
from sessions_app.models import (
    AutoRecoveryPolicy,
    Delivery,
    Project,
    RecoveryRecord,
    Session,
    ToolPolicy,
    WebhookEndpoint,
)
from sessions_app.services import notify
from tests.servers import PROJECT_DIR, database_url
from tests.sessions_app.test_worker import crash
from tests.webhook_receiver import receiver  # noqa: F401  (the fixture)


@pytest.fixture
def policies(db):
    ToolPolicy.objects.create(pattern="lookup_*", side_effect=ToolPolicy.READ_ONLY)
    ToolPolicy.objects.create(pattern="send_*", side_effect=ToolPolicy.EXTERNAL_EFFECT)
    return AutoRecoveryPolicy.objects.create(agent_pattern="indexer-*")


def run(*args) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("recovery_worker", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


@pytest.mark.django_db
def test_once_recovers_and_prints_what_it_did(policies):
    crash("safe", "indexer-1", "lookup_customer")
    crash("emailed", "indexer-1", "send_email")
    out, err = run("--once", "--verbosity", "2")  # with the sessions it leaves, when asked
    record = RecoveryRecord.objects.get()
    assert out.splitlines() == [
        f"recovered safe agent=indexer-1 policy=indexer-* strategies=restart_turn record={record.pk}",
        "skipped emailed agent=indexer-1 policy=indexer-* (not safe to restart, no longer stalled, or already recovered)",
    ]
    assert err == "" and record.session_id == "safe" and record.automatic
    assert Session.objects.get(pk="emailed").interrupted
    assert run("--once", "--verbosity", "2") == ("", "")  # nothing more to do until a log grows


@pytest.mark.django_db
def test_once_prints_a_held_session(policies):
    AutoRecoveryPolicy.objects.filter(pk=policies.pk).update(max_per_hour=1)
    crash("a", "indexer-1", "lookup_customer")
    crash("b", "indexer-1", "lookup_customer")
    lines = run("--once")[0].splitlines()
    assert lines[0].startswith("recovered a ") and lines[1].startswith("held b agent=indexer-1 policy=indexer-* (repeated failures")


@pytest.mark.django_db
def test_once_fails_when_the_database_is_down(policies):
    err = io.StringIO()
    with mock.patch.object(worker, "run_round", side_effect=OperationalError("connection refused")):
        with pytest.raises(CommandError, match="database unavailable"):
            call_command("recovery_worker", "--once", stdout=io.StringIO(), stderr=err)
    assert "database unavailable, retrying next round: OperationalError: connection refused" in err.getvalue()


@pytest.mark.django_db(transaction=True)  # the worker closes its broken connection: committed rows only
def test_the_loop_survives_a_database_outage_and_stops_on_ctrl_c(policies):
    crash("safe", "indexer-1", "lookup_customer")
    real_round = worker.run_round
    rounds = iter([OperationalError("server closed the connection"), None, KeyboardInterrupt()])

    def flaky_round(**kwargs):
        outcome = next(rounds)
        if isinstance(outcome, BaseException):
            raise outcome
        return real_round(**kwargs)

    previous = signal.getsignal(signal.SIGTERM)
    try:
        with mock.patch.object(worker, "run_round", flaky_round):
            out, err = run("--interval", "0.01")
    finally:
        signal.signal(signal.SIGTERM, previous)  # the command installs its own
    assert "database unavailable, retrying next round" in err, (out, err)
    lines = out.splitlines()
    assert lines[0] == "recovery worker: a round every 0.01 s" and lines[-1] == "recovery worker: stopped"
    assert lines[1].startswith("recovered safe "), (out, err)
    assert RecoveryRecord.objects.get().session_id == "safe"


def test_the_interval_must_be_positive():
    with pytest.raises(CommandError, match="above 0"):
        call_command("recovery_worker", "--interval", "0")


@pytest.mark.django_db(transaction=True)
def test_two_worker_processes_recover_once_and_stop_on_sigterm(policies, tmp_path):
    ids = [f"ro-{n}" for n in range(3)]
    for session_id in ids:
        crash(session_id, "indexer-1", "lookup_customer")
    crash("emailed", "indexer-1", "send_email")
    env = {"DATABASE_URL": database_url(connection.settings_dict), "PATH": "/usr/bin:/bin"}
    logs = [tmp_path / f"worker{n}.log" for n in range(2)]
    workers = [
        subprocess.Popen(
            [sys.executable, "manage.py", "recovery_worker", "--interval", "0.2"],
            cwd=PROJECT_DIR, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT,
        )  # fmt: skip
        for log in logs
    ]
    try:
        deadline = time.monotonic() + 60
        while RecoveryRecord.objects.count() < 3 and time.monotonic() < deadline:
            assert all(w.poll() is None for w in workers), [log.read_text() for log in logs]
            time.sleep(0.2)
        time.sleep(1)  # a few more rounds of both
    finally:
        for w in workers:
            w.send_signal(signal.SIGTERM)
        codes = [w.wait(timeout=20) for w in workers]
    output = [log.read_text() for log in logs]
    assert codes == [0, 0], output
    assert all(text.rstrip().endswith("recovery worker: stopped") for text in output), output
    assert sorted(RecoveryRecord.objects.values_list("session_id", flat=True)) == ids
    recovered = sorted(line.split()[1] for text in output for line in text.splitlines() if line.startswith("recovered "))
    assert recovered == ids, output
    assert Session.objects.get(pk="emailed").interrupted


@pytest.mark.django_db(transaction=True)
def test_the_loop_indexes_for_search_between_rounds_and_says_an_outage_once(policies):
    services.create_session(session_id="s")
    services.append_events(session_id="s", events=validate_batch([{"type": "user_message", "data": {"content": "findme"}}]))
    real_index, real_round = services.index_pending, worker.run_round
    indexing = iter([OperationalError("server closed the connection")] * 2 + [None] * 10)
    rounds = iter([None, None, None, KeyboardInterrupt()])

    def flaky(outcomes, real):
        def call(**kwargs):
            outcome = next(outcomes)
            if isinstance(outcome, BaseException):
                raise outcome
            return real(**kwargs)
        return call

    previous = signal.getsignal(signal.SIGTERM)
    try:
        with mock.patch.object(services, "index_pending", flaky(indexing, real_index)), mock.patch.object(worker, "run_round", flaky(rounds, real_round)):
            out, err = run("--interval", "0.01")
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert err.count("search index: database unavailable, retrying every second") == 1, err
    assert Session.objects.get(pk="s").search_indexed_seq == 1  # indexed once the database answered


@pytest.mark.django_db(transaction=True)
def test_two_worker_processes_send_one_signed_alert_of_a_stall(receiver, tmp_path, settings):  # noqa: F811
    """The real command, twice at once: the stall is noted once and its one delivery arrives once, verified."""
    settings.TURNLOG_WEBHOOK_ALLOW_PRIVATE = True
    hook = notify.create_endpoint(project=Project.default(), actor=None, url=receiver.url, kinds=["stalled"])
    WebhookEndpoint.objects.update(created_at=timezone.now() - timedelta(hours=1))  # there before the crash
    crash("mailer-crash", "mailer", "send_email")  # quiet for 20 minutes: stalled; no policy recovers it
    env = {"DATABASE_URL": database_url(connection.settings_dict), "PATH": "/usr/bin:/bin", "TURNLOG_WEBHOOK_ALLOW_PRIVATE": "1"}
    logs = [tmp_path / f"worker{n}.log" for n in range(2)]
    workers = [
        subprocess.Popen(
            [sys.executable, "manage.py", "recovery_worker", "--interval", "0.2"],
            cwd=PROJECT_DIR, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT,
        )  # fmt: skip
        for log in logs
    ]
    try:
        deadline = time.monotonic() + 60
        while not receiver.received and time.monotonic() < deadline:
            assert all(w.poll() is None for w in workers), [log.read_text() for log in logs]
            time.sleep(0.2)
        time.sleep(2)  # several more rounds and passes of both
    finally:
        for w in workers:
            w.send_signal(signal.SIGTERM)
        codes = [w.wait(timeout=20) for w in workers]
    output = [log.read_text() for log in logs]
    assert codes == [0, 0], output
    [body] = receiver.verified(hook.secret)
    assert body["type"] == "session.stalled" and body["session"]["id"] == "mailer-crash"
    told = [line for text in output for line in text.splitlines() if line.startswith("stalled ")]
    assert told == ["stalled mailer-crash agent=mailer policy=- (told 1 webhook(s))"], output
    assert Delivery.objects.get().state == Delivery.DELIVERED


@pytest.mark.django_db
def test_once_sends_what_is_due_and_says_a_failed_attempt(receiver, settings):  # noqa: F811
    settings.TURNLOG_WEBHOOK_ALLOW_PRIVATE = True
    receiver.statuses = [503]
    notify.create_endpoint(project=Project.default(), actor=None, url=receiver.url)
    WebhookEndpoint.objects.update(created_at=timezone.now() - timedelta(hours=1))
    crash("mailer-crash", "mailer", "send_email")
    out, err = run("--once")
    delivery = Delivery.objects.get()
    assert out.splitlines() == [
        "stalled mailer-crash agent=mailer policy=- (told 1 webhook(s))",
        f"webhook {delivery.webhook_id} attempt 1: retry HTTP 503",
    ]
    assert err == "" and len(receiver.received) == 1
