"""Verdicts and reconcilers: what a person or a check endpoint found out about a call (session-log.md 8.2).

Verdicts live beside the log, never in it: recording, replacing or withdrawing one
appends no event. A call has at most one current verdict (withdrawn_at None);
replaced and withdrawn ones stay, stamped with when and by whom.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from sessions_app.models.projects import Project
from sessions_app.models.recovery import ToolPolicy
from sessions_app.models.sessions import CallIdField, Session

HAPPENED, NOT_HAPPENED, UNKNOWN = "happened", "not_happened", "unknown"
OUTCOMES = (HAPPENED, NOT_HAPPENED)
PERSON, RECONCILER = "person", "reconciler"


class Verdict(models.Model):
    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="verdicts")
    call_id = CallIdField(max_length=255)
    outcome = models.CharField(max_length=16, choices=[(HAPPENED, "Happened"), (NOT_HAPPENED, "Not happened")])
    evidence = models.TextField()
    external_ref = models.CharField(max_length=500, blank=True, default="")
    source = models.CharField(max_length=16, choices=[(PERSON, "Person"), (RECONCILER, "Reconciler")])
    # Who found it, as shown: the user's name, "reconciler:<policy pattern>", or an imported author.
    by = models.CharField(max_length=250)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    at = models.DateTimeField(default=timezone.now)
    withdrawn_at = models.DateTimeField(null=True, blank=True)
    withdrawn_by = models.CharField(max_length=250, blank=True, default="")
    withdraw_reason = models.TextField(blank=True, default="")

    class Meta:
        ordering = ["at", "id"]
        indexes = [models.Index(fields=["session", "call_id", "at"], name="verdict_call_idx")]
        constraints = [
            models.UniqueConstraint(
                fields=["session", "call_id"], condition=models.Q(withdrawn_at__isnull=True), name="verdict_one_current"
            )
        ]

    def __str__(self) -> str:
        return f"{self.session_id} call {self.call_id}: {self.outcome} by {self.by}"

    @property
    def current(self) -> bool:
        return self.withdrawn_at is None


class CallCheck(models.Model):
    """A reconciler's work on one call: asked again with backoff until it answers or the attempts run out."""

    PENDING, SETTLED, GAVE_UP = "pending", "settled", "gave_up"
    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="+")
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    call_id = CallIdField(max_length=255)
    policy = models.ForeignKey(ToolPolicy, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    state = models.CharField(max_length=16, default=PENDING)
    attempts = models.PositiveIntegerField(default=0)
    next_at = models.DateTimeField(default=timezone.now)
    created_at = models.DateTimeField(default=timezone.now)
    # A worker holding it until then (a slow endpoint is asked outside any transaction).
    claimed_until = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["session", "call_id"], name="call_check_unique")]
        indexes = [models.Index(fields=["state", "next_at"], name="call_check_due_idx")]


class CheckAttempt(models.Model):
    """One question a reconciler was asked, and what came back (none of it is a verdict unless it says so)."""

    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="+")
    call_id = CallIdField(max_length=255)
    pattern = models.CharField(max_length=200)
    at = models.DateTimeField(default=timezone.now)
    status = models.PositiveIntegerField(null=True, blank=True)  # the HTTP status; None when none came back
    outcome = models.CharField(max_length=16, blank=True, default="")
    error = models.TextField(blank=True, default="")

    class Meta:
        ordering = ["at", "id"]
        indexes = [models.Index(fields=["session", "call_id", "at"], name="check_attempt_call_idx")]


class ReceiptSweep(models.Model):
    """A policy's receipt pointer added or changed: the worker re-reads the stored calls of the tools it
    may match, in LedgerCall id order, from after_id on (resumable after a kill)."""

    project = models.ForeignKey(Project, null=True, blank=True, on_delete=models.CASCADE, related_name="+")  # None: every project
    pattern = models.CharField(max_length=200)
    after_id = models.BigIntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now)
