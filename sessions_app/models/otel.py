"""OTLP ingest's memory of each session: the traces it has turned into turns, and the spans it has taken.

Neither is an event: the log holds what the spans said; these rows hold what
the planner needs to place the next span (sessions_app/otel/planner.py).
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from sessions_app.models.projects import Project
from sessions_app.models.sessions import Session


class OtlpTrace(models.Model):
    """One trace (one run) of a session: its turn and what the log already holds of it."""

    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="otlp_traces")
    trace_id = models.CharField(max_length=32)
    turn_seq = models.PositiveIntegerField(null=True, blank=True)
    root_arrived = models.BooleanField(default=False)
    closed = models.BooleanField(default=False)
    # When the server received the trace's latest span: a finished run's turn closes after the settle time.
    last_span_at = models.DateTimeField()
    state = models.JSONField(default=dict)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["session", "trace_id"], name="otlp_trace_session_unique")]
        indexes = [
            # A trace's session, for spans of it that carry no conversation id.
            models.Index(fields=["trace_id"], name="otlp_trace_id_idx"),
            # The open traces of a session (loaded by every batch), and the worker's finished ones to close.
            models.Index(fields=["session", "turn_seq"], name="otlp_trace_open_idx", condition=Q(closed=False)),
            models.Index(fields=["last_span_at"], name="otlp_trace_settle_idx", condition=Q(closed=False, root_arrived=True)),
        ]


class OtlpSpan(models.Model):
    """A span taken (or the start of one, from a pending span): a repeat stores nothing new."""

    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="otlp_spans")
    trace_id = models.CharField(max_length=32)
    span_id = models.CharField(max_length=16)
    pending = models.BooleanField(default=False)
    # What the span said (otel.spans.digest): the same ids with other content is refused, never taken
    # for a retry. Empty for spans taken before digests were kept (any content is then a repeat).
    digest = models.CharField(max_length=32, blank=True, default="")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["session", "trace_id", "span_id", "pending"], name="otlp_span_unique")
        ]


class OtlpHeldSpan(models.Model):
    """A span of a trace no span has yet tied to a conversation, held until one does (then written to
    the conversation's session) or until the trace is quiet for the settle time (then to the session
    named after the trace). Not an event: nothing of it is in a log until it is released."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="otlp_held_spans")
    trace_id = models.CharField(max_length=32)
    span_id = models.CharField(max_length=16)
    pending = models.BooleanField(default=False)
    digest = models.CharField(max_length=32, blank=True, default="")
    received_at = models.DateTimeField()
    # The reading (otel.readings.as_json), checked storable when it arrived.
    reading = models.BinaryField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["project", "trace_id", "span_id", "pending"], name="otlp_held_span_unique")
        ]
        indexes = [models.Index(fields=["received_at"], name="otlp_held_received_idx")]
