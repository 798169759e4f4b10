"""services.receipts: a tool policy changed later re-reads stored calls' receipts in resumable batches
(a worker killed with SIGKILL mid-sweep leaves every batch it committed, and the next one goes on from there)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest
from django.db import connection

from sessions_app import services, worker
from sessions_app.log.events import validate_batch
from sessions_app.models import LedgerCall, Project, ReceiptSweep, ToolPolicy
from sessions_app.services import receipts
from tests.servers import PROJECT_DIR, database_url


def calls(session_id: str, count: int, *, tool: str = "charge_card", project=None) -> None:
    services.create_session(session_id=session_id, project=project)
    events = []
    for n in range(count):
        cid = f"{session_id}-{n}"
        events.append({"type": "assistant_message", "data": {"content": "", "tool_calls": [{"id": cid, "name": tool, "arguments": {}}]}})
        events.append({"type": "tool_result", "data": {"tool_call_id": cid, "content": json.dumps({"id": f"ch_{cid}"})}})
    services.append_events(session_id=session_id, events=validate_batch(events))


def receipts_of(session_id: str) -> list[str | None]:
    return list(LedgerCall.objects.filter(session_id=session_id).order_by("id").values_list("receipt", flat=True))


@pytest.mark.django_db
def test_a_pointer_added_later_is_applied_and_the_sweep_is_gone_when_done():
    calls("s", 5)
    calls("other-tool", 2, tool="lookup")
    assert set(receipts_of("s")) == {None}
    ToolPolicy.objects.create(pattern="charge_*", side_effect="external_effect", receipt_pointer="/id")
    receipts.sweep_for_policy_change(project_id=None, pattern="charge_*")
    assert receipts.run_sweeps(batch_size=2) == 5  # the lookup calls are not read
    assert receipts_of("s") == [f"ch_s-{n}" for n in range(5)]
    assert not ReceiptSweep.objects.exists()


@pytest.mark.django_db
def test_a_policy_deleted_or_changed_later_clears_or_changes_the_receipts():
    policy = ToolPolicy.objects.create(pattern="charge_*", side_effect="external_effect", receipt_pointer="/id")
    calls("s", 2)
    assert receipts_of("s") == ["ch_s-0", "ch_s-1"]
    policy.receipt_pointer = "/missing"
    policy.save()
    receipts.sweep_for_policy_change(project_id=None, pattern="charge_*")
    worker.sweep_receipts(batches=None)
    assert receipts_of("s") == [None, None]


@pytest.mark.django_db
def test_a_projects_sweep_reads_only_that_projects_calls():
    billing = Project.objects.create(slug="billing", name="Billing")
    calls("theirs", 2)
    calls("ours", 2, project=billing)
    ToolPolicy.objects.create(project=billing, pattern="charge_card", side_effect="external_effect", receipt_pointer="/id")
    receipts.sweep_for_policy_change(project_id=billing.pk, pattern="charge_card")
    assert receipts.run_sweeps() == 2
    assert (receipts_of("ours"), receipts_of("theirs")) == (["ch_ours-0", "ch_ours-1"], [None, None])


@pytest.mark.django_db(transaction=True)
def test_a_worker_killed_mid_sweep_keeps_what_it_committed_and_the_next_one_resumes(tmp_path):
    calls("s", 40)
    ToolPolicy.objects.create(pattern="charge_*", side_effect="external_effect", receipt_pointer="/id")
    sweep = receipts.sweep_for_policy_change(project_id=None, pattern="charge_*")
    # One call per batch, a few batches a second: slow enough to be killed in the middle.
    env = {"DATABASE_URL": database_url(connection.settings_dict), "PATH": "/usr/bin:/bin", "TURNLOG_RECEIPT_SWEEP_BATCH": "1"}
    log = tmp_path / "worker.log"
    process = subprocess.Popen(
        [sys.executable, "manage.py", "recovery_worker", "--interval", "1000"],
        cwd=PROJECT_DIR, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while ReceiptSweep.objects.get(pk=sweep.pk).after_id == 0:
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.02)
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=10)
    after_id = ReceiptSweep.objects.get(pk=sweep.pk).after_id
    ids = list(LedgerCall.objects.filter(session_id="s").order_by("id").values_list("id", flat=True))
    assert ids[0] <= after_id < ids[-1], "killed before the sweep ended"
    # Exactly the batches it committed: every call up to after_id has its receipt, none after it.
    for row in LedgerCall.objects.filter(session_id="s"):
        assert (row.receipt is not None) == (row.pk <= after_id), (row.pk, after_id, row.receipt)
    read = worker.sweep_receipts(batches=None)
    assert read == len([i for i in ids if i > after_id])  # resumed after the last committed batch
    assert receipts_of("s") == [f"ch_s-{n}" for n in range(40)]
    assert not ReceiptSweep.objects.exists()
