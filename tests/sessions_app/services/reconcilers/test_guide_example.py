"""The reconcilers guide's thirty-line reconciler (docs/guide/reconcilers.md), run as written in its own process
over a payments table, and asked by the worker's code: happened, not_happened and unknown as the table says."""

from __future__ import annotations

import os
import re
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sessions_app.models import CheckAttempt, LedgerCall, Project, Verdict, new_secret
from sessions_app.services import reconcilers
from tests.reconciler_endpoint import check_policy
from tests.sessions_app.services.notify.crashes import crashed, stalled_clock

GUIDE = Path(__file__).resolve().parents[4] / "docs" / "guide" / "reconcilers.md"


def guide_example() -> str:
    section = GUIDE.read_text()
    section = section[section.index("## A reconciler in thirty lines") :]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def reconciler(tmp_path):
    """The guide's script serving a payments table: order-42 charged, order-43 pending, nothing for order-44."""
    db = tmp_path / "payments.sqlite3"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE payments (id TEXT, idempotency_key TEXT, status TEXT)")
        conn.executemany("INSERT INTO payments VALUES (?, ?, ?)", [("pay_81", "order-42", "succeeded"), ("pay_82", "order-43", "pending")])
    script, port, secret = tmp_path / "reconciler.py", free_port(), new_secret()
    script.write_text(guide_example())
    env = {**os.environ, "RECONCILER_SECRET": secret, "PAYMENTS_DB": str(db), "PORT": str(port)}
    process = subprocess.Popen([sys.executable, str(script)], env=env, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            assert process.poll() is None, process.stderr.read().decode()
            assert time.monotonic() < deadline, "the guide's reconciler did not start"
            time.sleep(0.05)
    yield f"http://127.0.0.1:{port}/", secret
    process.terminate()
    process.wait(timeout=10)


def test_the_guides_reconciler_is_about_thirty_lines():
    assert len(guide_example().strip().splitlines()) <= 36


@pytest.mark.django_db
def test_the_guides_reconciler_answers_from_its_payments_table(reconciler, settings):
    settings.TURNLOG_WEBHOOK_ALLOW_PRIVATE = True
    url, secret = reconciler
    check_policy(url, secret, project=Project.default())
    later = None
    for session_id, key in [("charged", "order-42"), ("pending", "order-43"), ("never", "order-44")]:
        later = stalled_clock(crashed(session_id))
        # The agent's idempotency key, as the ledger reads it from the call (session-log.md section 1).
        LedgerCall.objects.filter(session_id=session_id, call_id="c3").update(idempotency_key=key)
    reconcilers.schedule_checks(now=later)
    asked = {a.session_id: (a.outcome, a.answer) for a in reconcilers.ask_due(now=later)}
    assert asked == {"charged": ("settled", "happened"), "pending": ("retry", "unknown"), "never": ("settled", "not_happened")}
    charged = Verdict.objects.get(session_id="charged")
    assert (charged.outcome, charged.external_ref, charged.by) == ("happened", "pay_81", "reconciler:tool_c3")
    assert charged.evidence == "payment pay_81 (succeeded) has key order-42"
    assert CheckAttempt.objects.get(session_id="pending").error == "the reconciler does not know yet: payment pay_82 is still pending"
