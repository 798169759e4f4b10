"""The call ledger: one row per call a session first sighted, kept current in the append and recovery transactions.

The row holds the facts the state rules of api.md ("Calls, notes and search") read,
each as the log has shown it so far, so that lists answer a call's state from
indexed columns instead of reading whole logs. The state itself is decided in
sessions_app/services/ledger (the status-independent part, `settled_state`) and, for calls
whose state follows the session's status (running, stalled, active), in the
query (selectors/fleet_calls.py). Rows are derived data, not events: the ledger
rewrites them as the log grows (and `manage.py ledger_rebuild` recomputes them).
"""

from __future__ import annotations

from django.db import models

from sessions_app.models.projects import Project
from sessions_app.models.sessions import CallIdField, Session


class LedgerCall(models.Model):
    # No database constraints, for the reason Event.session gives (appends stay one statement per table).
    session = models.ForeignKey(Session, on_delete=models.PROTECT, related_name="+", db_index=False, db_constraint=False)
    # Copied from the session for the fleet's indexed filters (a session never changes project or agent).
    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="+", db_constraint=False)
    agent_name = models.CharField(max_length=200, blank=True, default="")
    call_id = CallIdField(max_length=255)
    # The tool's name when the call names it with text (what a ToolPolicy matches); None otherwise.
    tool = models.CharField(max_length=200, null=True, blank=True)
    arguments_preview = models.CharField(max_length=200, blank=True, default="")
    seq = models.PositiveIntegerField()  # first sighting
    time = models.DateTimeField()  # the time the first-sighting event claims
    # When the server stored the first sighting (an import's: its claimed time): "pending past the stall window".
    sighted_at = models.DateTimeField()
    turn_seq = models.PositiveIntegerField(null=True, blank=True)  # innermost turn at first sighting
    step_seq = models.PositiveIntegerField(null=True, blank=True)
    # The facts the plan's risk table reads (log.recovery._classify), each as the log holds it so far.
    turn_open = models.BooleanField(default=False)
    dispatched = models.BooleanField(default=False)  # a tool_call event names it
    turn_dispatched = models.BooleanField(default=False)  # its turn holds a tool_call event
    step_closed = models.BooleanField(default=False)
    # The results so far: the first real one (and whether it says error), the first stand-in
    # (synthetic or patch), the first synthetic one (and the risk it carries), the first patch.
    real_seq = models.PositiveIntegerField(null=True, blank=True)
    real_error = models.BooleanField(default=False)
    standin_seq = models.PositiveIntegerField(null=True, blank=True)
    synthetic_seq = models.PositiveIntegerField(null=True, blank=True)
    synthetic_risk = models.CharField(max_length=24, blank=True, default="")
    patch_seq = models.PositiveIntegerField(null=True, blank=True)
    # Derived from the facts above: the state when the session's status cannot change it (None
    # while it can: owed by an open turn, or sighted outside every turn without a result), the
    # result that decided it, and the risk the plan gives an owed call.
    settled_state = models.CharField(max_length=24, null=True, blank=True)
    result_seq = models.PositiveIntegerField(null=True, blank=True)
    owed_risk = models.CharField(max_length=24, null=True, blank=True)
    # What helps a person settle the call (api.md, "Verdicts, receipts and reconcilers"): the idempotency
    # key the agent used (section 1), the receipt the tool policy's pointer finds in the first real
    # result, and the current verdict's outcome and external reference (copied from Verdict).
    idempotency_key = models.CharField(max_length=500, null=True, blank=True)
    # Where the key was read (log.receipts: DISPATCH, ENTRY, ARGUMENTS, RESULT): a later event's key
    # replaces it only from a better place, so the key does not depend on the order events came in.
    idempotency_key_rank = models.PositiveSmallIntegerField(null=True, blank=True)
    receipt = models.CharField(max_length=500, null=True, blank=True)
    verdict = models.CharField(max_length=16, null=True, blank=True)
    verdict_ref = models.CharField(max_length=500, null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["session", "call_id"], name="ledger_session_call_unique")]
        indexes = [
            models.Index(fields=["project", "-sighted_at", "-id"], name="ledger_project_time_idx"),
            models.Index(fields=["project", "settled_state", "-sighted_at", "-id"], name="ledger_project_state_idx"),
            # GET /api/v1/calls lists the calls to check without a current verdict by default (or those with one).
            models.Index(fields=["project", "settled_state", "verdict", "-sighted_at", "-id"], name="ledger_project_verdict_idx"),
            models.Index(fields=["project", "tool"], name="ledger_project_tool_idx"),  # the class filter's tool names
            models.Index(fields=["session", "turn_seq"], name="ledger_turn_idx"),
            models.Index(fields=["session", "step_seq"], name="ledger_step_idx"),
            # A session's ledger panel: its calls to check, and the latest (selectors.ledger.session_ledger).
            models.Index(fields=["session", "settled_state", "seq"], name="ledger_session_state_idx"),
            models.Index(fields=["session", "-seq", "-id"], name="ledger_session_seq_idx"),
            # ?ref=: which call made charge ch_3Px (by receipt, idempotency key or a verdict's reference).
            models.Index(fields=["project", "receipt"], name="ledger_project_receipt_idx"),
            models.Index(fields=["project", "idempotency_key"], name="ledger_project_key_idx"),
            models.Index(fields=["project", "verdict_ref"], name="ledger_project_verdict_ref_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.session_id} call {self.call_id}"
