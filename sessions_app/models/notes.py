"""Notes: what people pin beside a session's log (on the whole session or on one event).

Notes are not events: they live in their own table, are edited and deleted
(by their author or a project admin, each change audited), and never change
the log they sit beside.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from sessions_app.models.sessions import Session


class Note(models.Model):
    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="notes")
    # The event the note is pinned to; None: a note on the whole session.
    seq = models.PositiveIntegerField(null=True, blank=True)
    text = models.TextField()
    tags = models.JSONField(default=list, blank=True)
    # The local user who wrote it; None for an imported note (kept as text in author_name,
    # never matched to a local user) or once the account is gone.
    author = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    # Who wrote it, as shown: the user's name at writing, or the imported author.
    author_name = models.CharField(max_length=150)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["created_at", "id"]
        indexes = [models.Index(fields=["session", "created_at", "id"], name="note_session_time_idx")]

    def __str__(self) -> str:
        where = f"seq {self.seq}" if self.seq is not None else "the session"
        return f"Note on {self.session_id} ({where}) by {self.author_name}"
