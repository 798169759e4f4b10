"""Recovery's records and rules: each applied repair, the auto-recovery and tool policies,
and the per-agent hourly counts the Agents page reads."""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone

from sessions_app.models.projects import Project
from sessions_app.models.sessions import Session


class RecoveryRecord(models.Model):
    """The audit trail of one applied repair: who confirmed which plan, when, why."""

    RECOVERY = "recovery"
    DANGLING_PATCH = "dangling_patch"
    KINDS = [(RECOVERY, "Recovery of open turns"), (DANGLING_PATCH, "Patch of dangling tool calls")]

    session = models.ForeignKey(Session, on_delete=models.PROTECT, related_name="recoveries")
    kind = models.CharField(max_length=20, choices=KINDS, default=RECOVERY)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    # Kept apart from `user` so the record still names a person after the account is gone.
    username = models.CharField(max_length=150)
    created_at = models.DateTimeField(default=timezone.now)
    note = models.TextField(blank=True, default="")
    digest = models.CharField(max_length=64)
    first_seq = models.PositiveIntegerField()
    last_seq = models.PositiveIntegerField()
    # Recoveries only (section 8.1): the strategies recomputed under the lock (api.md's wire
    # form, innermost turn first), whether a person abandoned the turns, and whether the
    # worker applied it under an auto-recovery policy.
    strategies = models.JSONField(default=list, blank=True)
    abandoned = models.BooleanField(default=False)
    automatic = models.BooleanField(default=False)
    policy = models.ForeignKey("AutoRecoveryPolicy", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    # Copied from the session so per-agent failure history is an indexed read.
    agent_name = models.CharField(max_length=200, blank=True, default="")
    turns_closed = models.PositiveIntegerField(default=0)
    # How long the session had been quiet when it was recovered (time spent stalled).
    quiet_seconds = models.FloatField(null=True, blank=True)
    # The recovery-context system_message, when one was asked for.
    context_seq = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["agent_name", "-created_at"], name="recovery_agent_idx")]

    @property
    def strategy_names(self) -> list[str]:
        return [s.get("strategy") for s in self.strategies]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} of {self.session_id} by {self.username} (seqs {self.first_seq}-{self.last_seq})"

    @property
    def seqs(self) -> range:
        return range(self.first_seq, self.last_seq + 1)


class AutoRecoveryPolicy(models.Model):
    """Lets the worker recover stalled sessions of matching agents without a person (section 8.1).

    Only turns whose strategy is restart_turn are ever recovered automatically.
    """

    agent_pattern = models.CharField(
        max_length=200, unique=True, help_text="Agent name or shell-style pattern, e.g. indexer-* or * for every agent"
    )
    enabled = models.BooleanField(default=True)
    min_quiet_seconds = models.PositiveIntegerField(
        default=900,
        help_text="Quiet time before the worker acts (never below the stall window): spans of long calls arrive only when they end",
    )
    max_per_hour = models.PositiveIntegerField(
        default=3, help_text="Automatic recoveries per agent per hour; past it the agent's sessions are left for a person"
    )
    note = models.CharField(max_length=300, blank=True, default="")

    class Meta:
        verbose_name_plural = "auto-recovery policies"
        ordering = ["agent_pattern"]

    def __str__(self) -> str:
        state = "on" if self.enabled else "off"
        return f"{self.agent_pattern}: {state}, after {self.min_quiet_seconds} s quiet, at most {self.max_per_hour}/h"

    def clean(self):
        if self.min_quiet_seconds < settings.TURNLOG_STALL_SECONDS:
            raise ValidationError(
                {"min_quiet_seconds": f"must be at least the stall window ({settings.TURNLOG_STALL_SECONDS} s, TURNLOG_STALL_SECONDS)"}
            )
        if self.max_per_hour < 1:
            raise ValidationError({"max_per_hour": "must be at least 1 (disable the policy instead)"})

    @property
    def quiet_seconds(self) -> int:
        """The quiet time the worker waits, never below the stall window (settings may change after saving)."""
        return max(self.min_quiet_seconds, settings.TURNLOG_STALL_SECONDS)


class AgentHour(models.Model):
    """Per-agent counts for one hour, kept at append and recovery time so the Agents page never scans logs."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    agent_name = models.CharField(max_length=200, blank=True, default="")
    hour = models.DateTimeField()
    sessions = models.PositiveIntegerField(default=0)
    turns = models.PositiveIntegerField(default=0)
    crashed_turns = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["project", "agent_name", "hour"], name="agent_hour_unique")]
        indexes = [models.Index(fields=["project", "hour"], name="agent_hour_project_idx")]


class ToolPolicy(models.Model):
    """How bad an unknown outcome of a tool is (ranks what a person checks first), where its
    receipt sits in its results, and the endpoint that can tell whether a call took effect.

    A policy with a project applies to that project's calls and wins over a site-wide one
    (project None) with the same pattern; among matching patterns the most specific wins
    (sessions_app.log.policies). Never changes the log's risk value (session-log.md section 8).
    """

    READ_ONLY = "read_only"
    IDEMPOTENT = "idempotent"
    EXTERNAL_EFFECT = "external_effect"
    CLASSES = [
        (READ_ONLY, "Read-only: safe to retry"),
        (IDEMPOTENT, "Idempotent or duplicate-detecting"),
        (EXTERNAL_EFFECT, "External effect: never retry without a human"),
    ]

    # None: a site-wide policy (site admins, the Django admin).
    project = models.ForeignKey(Project, null=True, blank=True, on_delete=models.CASCADE, related_name="tool_policies")
    pattern = models.CharField(max_length=200, help_text="Tool name or shell-style pattern, e.g. send_* or stripe.*")
    side_effect = models.CharField(max_length=20, choices=CLASSES)
    note = models.CharField(max_length=300, blank=True, default="")
    # An RFC 6901 JSON pointer into a real result's content (e.g. /id): the call's receipt.
    receipt_pointer = models.CharField(max_length=500, blank=True, default="")
    # The reconciler: where the worker asks whether a call with an unknown outcome took effect,
    # signed (Standard Webhooks) with the policy's own secret.
    check_url = models.URLField(max_length=2000, blank=True, default="")
    check_secret = models.CharField(max_length=100, blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name_plural = "tool policies"
        ordering = ["pattern"]
        constraints = [
            models.UniqueConstraint(fields=["project", "pattern"], name="tool_policy_project_pattern_unique"),
            models.UniqueConstraint(
                fields=["pattern"], condition=models.Q(project__isnull=True), name="tool_policy_site_pattern_unique"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.pattern} → {self.side_effect}"

    @property
    def scope(self) -> str:
        return "site" if self.project_id is None else "project"
