"""A crash with a side effect, settled and recovered with no person, and an agent that resumes without
repeating the effect: every piece a real process.

A Pydantic AI agent (tests/e2e/charge_agent.py) exports over OTLP with SimpleSpanProcessor to a live
Daphne and calls `charge_card(order, amount, idempotency_key)`; its tool writes the charge to a
payments table and the process is killed (kill -9). The worker (`manage.py recovery_worker`, its
own process) asks a reconciler (a real HTTP server here, verifying the Standard Webhooks signature)
whether the charge was made; the reconciler finds it by the idempotency key; Turnlog records the
verdict and, as the project allows, recovers the crash with the verdict and the recovery context.
The agent then resumes from Turnlog's history and does not charge again. With the charge not made,
the reconciler says so and the resumed agent charges once.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
import standardwebhooks
from django.contrib.auth import get_user_model
from django.db import connection

from sessions_app.models import AuditEntry, Project, RecoveryRecord, ToolPolicy
from sessions_app.models.notify import new_secret
from tests.access import token_for
from tests.servers import PROJECT_DIR, DaphneServer, database_url

AGENT = Path(__file__).with_name("charge_agent.py")
STALL = 3
KEY = "order-A1-charge"


@pytest.fixture
def payments(tmp_path) -> Path:
    path = tmp_path / "payments.sqlite3"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE payments (charge_id TEXT PRIMARY KEY, order_id TEXT, amount INTEGER, idempotency_key TEXT UNIQUE)")
    return path


def charges(payments: Path) -> list[tuple]:
    with sqlite3.connect(payments) as db:
        return db.execute("SELECT charge_id, order_id, amount, idempotency_key FROM payments").fetchall()


class Reconciler:
    """The payment team's check endpoint: looks the charge up by idempotency key, answers signed requests only."""

    def __init__(self, payments: Path, secret: str):
        self.payments, self.webhook, self.asked = payments, standardwebhooks.Webhook(secret), []
        reconciler = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                try:
                    question = reconciler.webhook.verify(body, dict(self.headers))
                except standardwebhooks.WebhookVerificationError:
                    self.send_response(401)
                    self.end_headers()
                    return
                reconciler.asked.append(question)
                with sqlite3.connect(reconciler.payments) as db:
                    found = db.execute("SELECT charge_id FROM payments WHERE idempotency_key = ?", (question["idempotency_key"],)).fetchone()
                answer = (
                    {"outcome": "happened", "evidence": "payments table: charge found by idempotency key", "external_ref": found[0]}
                    if found
                    else {"outcome": "not_happened", "evidence": "payments table: no charge with this idempotency key"}
                )
                data = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/check"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def world(transactional_db, tmp_path, payments):
    """Daphne, the worker and the reconciler; the project lets the worker recover crashes a reconciler settled."""
    secret = new_secret()
    reconciler = Reconciler(payments, secret)
    project = Project.default()
    project.auto_recover_settled = True
    project.save()
    ToolPolicy.objects.create(
        project=project, pattern="charge_card", side_effect=ToolPolicy.EXTERNAL_EFFECT,
        receipt_pointer="/charge_id", check_url=reconciler.url, check_secret=secret,
    )  # fmt: skip
    env = {"TURNLOG_STALL_SECONDS": str(STALL), "TURNLOG_OTLP_SETTLE_SECONDS": "1", "TURNLOG_WEBHOOK_ALLOW_PRIVATE": "1"}
    daphne = DaphneServer(connection.settings_dict, tmp_path / "daphne.log", **env).start()
    log = (tmp_path / "worker.log").open("w")
    worker = subprocess.Popen(
        [sys.executable, "manage.py", "recovery_worker", "--interval", "0.5", "-v", "2"],
        cwd=PROJECT_DIR, env={**os.environ, "DATABASE_URL": database_url(connection.settings_dict), **env}, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    token = token_for(get_user_model().objects.create_user("billing-agent"))
    try:
        yield daphne, token, reconciler, tmp_path
    finally:
        worker.terminate()
        worker.wait(timeout=10)
        log.close()
        daphne.stop()
        reconciler.close()


def api(daphne, token, path: str):
    answer = httpx.get(f"{daphne.url}/api/v1{path}", headers={"Authorization": f"Bearer {token}"}, timeout=10)
    return answer.json() if answer.status_code == 200 else None


def wait_for(condition, *, seconds: float, what: str):
    deadline = time.monotonic() + seconds
    while not (value := condition()):
        assert time.monotonic() < deadline, f"not within {seconds} s: {what}"
        time.sleep(0.2)
    return value


def run_until_killed(daphne, token, conversation: str, payments: Path, crash: str, marker: Path) -> None:
    agent = subprocess.Popen(
        [sys.executable, str(AGENT), daphne.url, token, conversation, str(payments), crash, str(marker)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        wait_for(marker.exists, seconds=60, what="the agent reached its tool")
        # SimpleSpanProcessor exported each span as it ended: the model's request naming the call is in.
        wait_for(lambda: api(daphne, token, f"/sessions/{conversation}/calls"), seconds=15, what="the call is sighted")
    finally:
        agent.kill()  # kill -9
        agent.wait()


def resume(daphne, token, conversation: str, payments: Path) -> str:
    done = subprocess.run(
        [sys.executable, str(AGENT), daphne.url, token, conversation, str(payments), "--resume"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def recovered(daphne, token, conversation: str):
    events = (api(daphne, token, f"/sessions/{conversation}/events?limit=1000") or {"events": []})["events"]
    return events if any(e["type"] == "turn_end" and e["data"].get("reason") == "interrupted" for e in events) else None


@pytest.mark.parametrize("charged", [True, False], ids=["charge-made", "charge-not-made"])
def test_a_crashed_charge_is_settled_by_the_reconciler_recovered_and_never_repeated(world, payments, charged):
    daphne, token, reconciler, tmp_path = world
    conversation = "billing-" + ("made" if charged else "not-made")
    crash = "--crash-after-charge" if charged else "--crash-before-charge"
    run_until_killed(daphne, token, conversation, payments, crash, tmp_path / "in-tool")
    assert len(charges(payments)) == (1 if charged else 0)

    # The worker: stalled, asked the reconciler (signed), recorded its verdict, recovered with the context.
    events = wait_for(lambda: recovered(daphne, token, conversation), seconds=STALL + 60, what="the worker recovered the crash")
    [question] = reconciler.asked
    assert question["type"] == "call.check" and question["name"] == "charge_card" and question["idempotency_key"] == KEY
    [call] = api(daphne, token, f"/sessions/{conversation}/calls")["calls"]
    assert call["state"] == "tool_outcome_unknown" and call["idempotency_key"] == KEY
    verdict = call["verdict"]
    assert verdict["source"] == "reconciler" and verdict["by"] == "reconciler:charge_card"
    assert verdict["outcome"] == ("happened" if charged else "not_happened")
    if charged:
        assert verdict["external_ref"] == charges(payments)[0][0]
    [synthetic] = [e for e in events if e["type"] == "tool_result" and e["data"]["metadata"].get("synthetic")]
    assert synthetic["data"]["metadata"]["risk"] == "tool_outcome_unknown"
    assert synthetic["data"]["metadata"]["verdict"]["outcome"] == verdict["outcome"]
    [context] = [e for e in events if e["type"] == "system_message" and e["data"]["metadata"].get("recovery_context")]
    assert "reconciler:charge_card" in context["data"]["content"]
    # What was decided and why, for the person reading afterwards: the recovery's record and the audit log.
    [record] = RecoveryRecord.objects.filter(session_id=conversation)
    assert record.automatic and record.context_seq == context["seq"] and "reconciler:charge_card" in record.note
    assert AuditEntry.objects.filter(action=AuditEntry.VERDICT_RECORDED, target=conversation, actor_name="worker").exists()
    assert AuditEntry.objects.filter(action=AuditEntry.RECOVERY, target=conversation).exists()

    # The agent resumes from Turnlog's history: one charge in the payments table, whichever way it went.
    output = resume(daphne, token, conversation, payments)
    assert "charged" in output
    assert len(charges(payments)) == 1
    assert len(reconciler.asked) == 1
    after = api(daphne, token, f"/sessions/{conversation}/calls?all=true")["calls"]
    charge_calls = [c for c in after if c["name"] == "charge_card"]
    assert len(charge_calls) == (1 if charged else 2)
