"""The audit log: who did what, when."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from sessions_app.models.projects import Project
from sessions_app.models.sessions import AppendOnlyViolation, EventQuerySet


class AuditEntry(models.Model):
    """Who did what, when: recoveries, forks, tokens, memberships, notes, refused requests. Append-only."""

    RECOVERY = "recovery"
    DANGLING_PATCH = "dangling_patch"
    FORK = "fork"
    TOKEN_CREATED = "token_created"
    TOKEN_REVOKED = "token_revoked"
    MEMBER_ADDED = "member_added"
    MEMBER_CHANGED = "member_changed"
    MEMBER_REMOVED = "member_removed"
    ACCESS_DENIED = "access_denied"
    AUTO_RECOVERY_HELD = "auto_recovery_held"
    NOTE_ADDED = "note_added"
    NOTE_EDITED = "note_edited"
    NOTE_DELETED = "note_deleted"
    SESSION_DELETED = "session_deleted"
    RETENTION_CHANGED = "retention_changed"
    WEBHOOK_CHANGED = "webhook_changed"
    VERDICT_RECORDED = "verdict_recorded"
    VERDICT_WITHDRAWN = "verdict_withdrawn"
    TOOL_POLICY_CHANGED = "tool_policy_changed"
    PROJECT_SETTINGS_CHANGED = "project_changed"
    ACTIONS = [
        (RECOVERY, "Recovery applied"),
        (DANGLING_PATCH, "Dangling calls patched"),
        (FORK, "Session forked"),
        (TOKEN_CREATED, "Token created"),
        (TOKEN_REVOKED, "Token revoked"),
        (MEMBER_ADDED, "Member added"),
        (MEMBER_CHANGED, "Member's role changed"),
        (MEMBER_REMOVED, "Member removed"),
        (ACCESS_DENIED, "Access denied"),
        (AUTO_RECOVERY_HELD, "Auto-recovery held"),
        (NOTE_ADDED, "Note added"),
        (NOTE_EDITED, "Note edited"),
        (NOTE_DELETED, "Note deleted"),
        (SESSION_DELETED, "Session deleted"),
        (RETENTION_CHANGED, "Retention changed"),
        (WEBHOOK_CHANGED, "Webhook changed"),
        (VERDICT_RECORDED, "Verdict recorded"),
        (VERDICT_WITHDRAWN, "Verdict withdrawn"),
        (TOOL_POLICY_CHANGED, "Tool policy changed"),
        (PROJECT_SETTINGS_CHANGED, "Project settings changed"),
    ]

    # None: a site-level action (a site token).
    project = models.ForeignKey(Project, null=True, blank=True, on_delete=models.PROTECT, related_name="audit_entries")
    created_at = models.DateTimeField(default=timezone.now)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    # Kept apart from `actor` so the entry still names someone after the account is gone
    # ("cli" for commands, "worker" for the automatic recovery worker).
    actor_name = models.CharField(max_length=150)
    action = models.CharField(max_length=20, choices=ACTIONS)
    # What it was done to, as people read it: a session id, a token prefix, a username.
    target = models.CharField(max_length=200, blank=True, default="")
    detail = models.JSONField(default=dict, blank=True)

    objects = EventQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["project", "-created_at", "-id"], name="audit_project_time_idx")]
        verbose_name_plural = "audit entries"

    def __str__(self) -> str:
        return f"{self.get_action_display()}: {self.target} by {self.actor_name}"

    def save(self, *args, **kwargs):
        if not self._state.adding:
            raise AppendOnlyViolation("audit entries are append-only")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise AppendOnlyViolation("audit entries are append-only")
