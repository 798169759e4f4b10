"""Reconcilers: check endpoints a project configures for a tool (its policy's check_url), asked by the worker
whether a call whose outcome is unknown took effect (docs/guide/reconcilers.md, api.md "Verdicts, receipts and
reconcilers").

scheduling.py decides which calls get a check and queues "Check now"; asking.py claims due checks, asks the
endpoint (signed, guarded, bounded) and records each attempt, and a verdict when the answer settles the call;
pool.py runs the asks in the worker's threads; settled.py recovers, with no person, a crash whose every
unknown call a reconciler settled (the project's auto_recover_settled).
"""

from .asking import BACKOFF, MAX_ATTEMPTS, Asked, ask, ask_due, claim_due, read_answer
from .pool import Asker
from .scheduling import any_reconciler, check_policy, queue_check, schedule_answered, schedule_checks

__all__ = [
    "BACKOFF", "MAX_ATTEMPTS", "Asked", "Asker", "any_reconciler", "ask", "ask_due", "check_policy", "claim_due", "queue_check",
    "read_answer", "schedule_answered", "schedule_checks",
]  # fmt: skip
