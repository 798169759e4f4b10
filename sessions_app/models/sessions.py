"""Storage of session logs.

`Event` rows are append-only: the model layer refuses every update and
delete (instance save of an existing row, instance delete, queryset update,
delete and bulk_update). Only a whole session is ever deleted, with its
events, by sessions_app/services/retention. The semantics live in `sessions_app.log`; these
models only persist them plus a summary that lists and filters can read
without scanning events.
"""

from __future__ import annotations

import hashlib

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models
from django.db.models import F, Q
from django.utils import timezone
from django.utils.functional import cached_property

from sessions_app.log import events as log_events
from sessions_app.log import recovery as log_recovery
from sessions_app.models.projects import Project

SESSION_ID_PATTERN = r"^[A-Za-z0-9._:-]{1,128}$"
session_id_validator = RegexValidator(
    SESSION_ID_PATTERN, "Session ids are 1 to 128 characters of A-Z a-z 0-9 . _ : -"
)


# The largest value of a 64-bit signed column (PostgreSQL bigint, SQLite integer).
REPLACE_BOUND_MAX = 2**63 - 1


class CallIdField(models.CharField):
    """A call id column. Section 1 allows ids of any length; one longer than the
    column is stored, and looked up, as "sha256:" and its digest, so filters by
    the id itself still find it."""

    def get_prep_value(self, value):
        value = super().get_prep_value(value)
        if isinstance(value, str) and len(value) > self.max_length:
            return "sha256:" + hashlib.sha256(value.encode()).hexdigest()
        return value


class AppendOnlyViolation(Exception):
    """Raised when code tries to change or remove a stored event."""


class Session(models.Model):
    id = models.CharField(primary_key=True, max_length=128, validators=[session_id_validator])
    # Ids stay globally unique (URLs carry no project); a fork stays in its parent's project.
    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="sessions")
    agent_name = models.CharField(max_length=200, blank=True, default="")
    metadata = models.JSONField(default=dict, blank=True)
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="forks"
    )
    seed_length = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now)

    # The summary, kept current by services.append_events in the append's
    # own transaction. event_count is also the next seq.
    event_count = models.PositiveIntegerField(default=0)
    # The claimed `time` of the last event, as the agent sent it.
    last_event_at = models.DateTimeField(null=True, blank=True)
    # Newest activity by the server's clock (when the last event was received, else creation;
    # an import's claimed last time, never past the import): status, stall window and list order.
    last_activity_at = models.DateTimeField(default=timezone.now)
    # What retention counts from (sessions_app/services/retention), by the server's clock: the latest of the session's
    # creation or import, its last event received, its last note added or edited and its last recovery, moved
    # forward in those writes' transactions under the session's lock. An import of old events starts at the import.
    retained_from = models.DateTimeField(default=timezone.now)
    # When the server received the last event (Event.received_at; a fork's: its last inherited
    # event's); None when unknown (stored before it was recorded, imported). What `active` reads,
    # and with last_event_at the header's clock-skew note.
    last_received_at = models.DateTimeField(null=True, blank=True)
    # Seqs of open turn_start / step_start events, newest last, exactly the
    # recovery scan's stacks after the last event.
    turn_stack = models.JSONField(default=list, blank=True)
    step_stack = models.JSONField(default=list, blank=True)
    interrupted = models.BooleanField(default=False)
    # Seqs of turn_ends that closed no open turn (the plan's warnings); almost always empty.
    stray_turn_ends = models.JSONField(default=list, blank=True)
    # Seqs of the tool_results dangling-call patches wrote that no patch of this session did
    # (a fork's inherited prefix, an imported blob's): a patch writes metadata {} as the spec
    # says, so only storage tells its results from a tool's (selectors.calls.patch_seqs).
    carried_patch_seqs = models.JSONField(default=list, blank=True)
    # When a recovery last closed this session's open turns.
    recovered_at = models.DateTimeField(null=True, blank=True)
    # Set when the automatic worker left this session for a person because its
    # agent passed its policy's hourly limit ("repeated failures").
    repeated_failures_at = models.DateTimeField(null=True, blank=True)
    # The event_count at which the worker last found this crash unsafe to restart: it looks
    # again only once the log grows, so stuck sessions do not crowd out new crashes.
    auto_checked_count = models.PositiveIntegerField(null=True, blank=True)
    # The search index holds this session's events below this seq (services/search.py):
    # it is filled after the append commits, so appends pay nothing for it, and every search
    # first indexes what is still below event_count. A fork starts at its seed length (its
    # prefix is answered from its parent's rows).
    search_indexed_seq = models.PositiveIntegerField(default=0)
    # Usage (api.md, "Usage and cost"), kept at append time by sessions_app/services/usage.py: the normalised
    # token kinds over every assistant_message, `tokens` (input + output) for sorting, the models in order of
    # first use, and the cost at the prices of `cost_basis` (the worker recomputes it when prices change).
    input_tokens = models.BigIntegerField(default=0, editable=False)
    output_tokens = models.BigIntegerField(default=0, editable=False)
    cache_read_tokens = models.BigIntegerField(default=0, editable=False)
    cache_write_tokens = models.BigIntegerField(default=0, editable=False)
    reasoning_tokens = models.BigIntegerField(default=0, editable=False)
    tokens = models.BigIntegerField(default=0, editable=False)
    models_used = models.JSONField(default=list, blank=True, editable=False)
    cost = models.DecimalField(max_digits=20, decimal_places=6, default=0, editable=False)
    priced = models.BooleanField(default=True, editable=False)
    unpriced = models.JSONField(default=list, blank=True, editable=False)
    cost_basis = models.CharField(max_length=100, blank=True, default="", editable=False)
    # The first event's receive time (an import's: its claimed time), and milliseconds from it to the last's.
    first_received_at = models.DateTimeField(null=True, blank=True, editable=False)
    duration_ms = models.BigIntegerField(default=0, editable=False)

    class Meta:
        ordering = ["-last_activity_at", "-id"]
        indexes = [
            # Only the sessions with events still to index: the indexer's and every search's first read.
            models.Index(fields=["project"], name="session_search_pending_idx", condition=Q(search_indexed_seq__lt=F("event_count"))),
            models.Index(fields=["-last_activity_at", "-id"], name="session_activity_idx"),
            models.Index(fields=["project", "agent_name", "-created_at"], name="session_agent_idx"),
            models.Index(fields=["interrupted", "-last_activity_at", "-id"], name="session_interrupted_idx"),
            models.Index(fields=["project", "-last_activity_at", "-id"], name="session_project_activity_idx"),
            # The retention sweep's read: a project's sessions past its retention, oldest first.
            models.Index(fields=["project", "retained_from", "id"], name="session_retention_idx"),
            # The list sorted by cost, tokens or duration (ties in the default order).
            models.Index(fields=["cost", "last_activity_at", "id"], name="session_cost_idx"),
            # Cheapest first with ties newest first: the mixed order no scan of the one above gives.
            models.Index(fields=["cost", "-last_activity_at", "-id"], name="session_cost_asc_idx"),
            models.Index(fields=["tokens", "last_activity_at", "id"], name="session_tokens_idx"),
            models.Index(fields=["duration_ms", "last_activity_at", "id"], name="session_duration_idx"),
            # The worker's read of costs priced before a price change: a project's sessions with tokens whose basis
            # is below or above today's (two ranges of this index), so a round with nothing stale reads no row.
            models.Index(fields=["project", "cost_basis"], name="session_cost_basis_idx", condition=Q(tokens__gt=0)),
        ]

    def __str__(self) -> str:
        return self.id

    @property
    def status(self) -> str:
        """running | stalled | active | recovered | clean (selectors.status_filter is the same rule in SQL).

        running / stalled: a turn is open, and something was written within
        TURNLOG_STALL_SECONDS or not. active: no turn is open and an event
        was received within that window, other than a recovery's own repairs
        (they are older than recovered_at, which is set after them), so a
        just-recovered session reads recovered. All by the server's clock
        (last_activity_at; last_received_at, which a fork copies and an import
        has none of), never by the times agents claim.
        """
        now = timezone.now()
        if self.interrupted:
            quiet = (now - self.last_activity_at).total_seconds()
            return "running" if quiet < settings.TURNLOG_STALL_SECONDS else "stalled"
        if (
            self.last_received_at is not None
            and (now - self.last_received_at).total_seconds() < settings.TURNLOG_STALL_SECONDS
            and (self.recovered_at is None or self.last_received_at > self.recovered_at)
        ):
            return "active"
        return "recovered" if self.recovered_at else "clean"

    @property
    def open_turns(self) -> list[int]:
        """Seqs of unclosed turn_start events, innermost first."""
        return list(reversed(self.turn_stack))

    @cached_property
    def open_turn_labels(self) -> list[str]:
        """Each open turn as people read it, innermost first: "turn 4 (opened at seq 50)".

        One indexed query; selectors.list_sessions fills it for a whole page at once.
        """
        if not self.turn_stack:
            return []
        starts = dict(Event.objects.filter(session=self, seq__in=self.turn_stack).values_list("seq", "data"))
        return open_turn_labels_of(self.open_turns, starts)

    @property
    def parent_ref(self) -> dict | None:
        if self.parent_id is None:
            return None
        return {"session_id": self.parent_id, "seed_length": self.seed_length}


def open_turn_labels_of(open_turns: list[int], starts: dict[int, dict]) -> list[str]:
    """Labels of open turns from their turn_start events' data (seq -> data)."""
    return [log_recovery.open_turn_label((starts.get(seq) or {}).get("turn"), seq) for seq in open_turns]


class EventQuerySet(models.QuerySet):
    def update(self, **kwargs):
        raise AppendOnlyViolation("events are append-only: update() is refused")

    def delete(self):
        raise AppendOnlyViolation("events are append-only: delete() is refused")

    def bulk_update(self, objs, fields, batch_size=None):
        raise AppendOnlyViolation("events are append-only: bulk_update() is refused")

    def update_or_create(self, *args, **kwargs):
        raise AppendOnlyViolation("events are append-only: update_or_create() is refused")


class Event(models.Model):
    # The unique (session, seq) index serves lookups by session; no second one.
    # No database constraint: PostgreSQL checks a foreign key with one query
    # per inserted row, half a second of a 100,000-event fork. Sessions are
    # deleted only by sessions_app/services/retention, which deletes their events first
    # under the session's lock (PROTECT refuses any other deletion in the ORM),
    # and events are only written by services under the session's lock or in
    # the transaction that created the fork, so the key cannot dangle.
    session = models.ForeignKey(
        Session, on_delete=models.PROTECT, related_name="events", db_index=False, db_constraint=False
    )
    seq = models.PositiveIntegerField()
    type = models.CharField(max_length=32, choices=[(t, t) for t in sorted(log_events.EVENT_TYPES)])
    # As the agent claimed it (or the append time when it gave none): shown, exported, never corrected.
    time = models.DateTimeField()
    # When the server received it; None when unknown (stored before it was recorded, imported).
    # A fork's copy keeps its source's.
    received_at = models.DateTimeField(null=True, blank=True)
    data = models.JSONField()
    # Copied out of data for indexed lookups: the call id of a tool_call or
    # tool_result.
    call_id = CallIdField(max_length=255, null=True, blank=True)
    # Structure at append time (sessions_app.log.structure.Placement): they
    # depend only on earlier events, so a forked prefix keeps them valid.
    turn_seq = models.PositiveIntegerField(null=True, blank=True)
    step_seq = models.PositiveIntegerField(null=True, blank=True)
    # The range of a compaction (surface_op ["replace", start, stop]), so
    # readers find the few summaries without reading every event's data.
    # 64-bit, and clamped to REPLACE_BOUND_MAX: section 1 accepts any bound,
    # data keeps it exactly, and no log reaches that length, so a clamped
    # bound shadows exactly the events the given one does.
    replace_start = models.PositiveBigIntegerField(null=True, blank=True)
    replace_stop = models.PositiveBigIntegerField(null=True, blank=True)

    objects = EventQuerySet.as_manager()

    class Meta:
        # No default ordering: every read orders by seq itself, and a default
        # would make each unordered query join the sessions table.
        constraints = [models.UniqueConstraint(fields=["session", "seq"], name="event_session_seq_unique")]
        indexes = [
            # Partial where most rows hold nothing, so appends and forks maintain small indexes.
            models.Index(fields=["session", "call_id"], name="event_call_id_idx", condition=Q(call_id__isnull=False)),
            models.Index(fields=["session", "replace_start"], name="event_replace_idx", condition=Q(replace_start__isnull=False)),
            # Grouping by turn and finding the turn_end that closed a turn.
            # (No index by type: lookups by type are cut by seq ranges of the
            # unique (session, seq) index, and every index slows appends and forks.)
            models.Index(fields=["session", "turn_seq", "seq"], name="event_turn_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.session_id}#{self.seq} {self.type}"

    def save(self, *args, **kwargs):
        if not self._state.adding:
            raise AppendOnlyViolation(f"event {self} is stored; events are append-only")
        kwargs["force_insert"] = True
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise AppendOnlyViolation(f"event {self} cannot be deleted; events are append-only")

    def to_log_event(self) -> log_events.Event:
        return log_events.Event(seq=self.seq, type=self.type, time=self.time, data=self.data, received_at=self.received_at)


class CallSighting(models.Model):
    """A call id named in an assistant message's tool_calls, for indexed lookups.

    Derived from the event at append time and as append-only as the event itself.
    """

    # No database constraint, for the reason Event.session gives.
    session = models.ForeignKey(
        Session, on_delete=models.PROTECT, related_name="call_sightings", db_index=False, db_constraint=False
    )
    seq = models.PositiveIntegerField()
    call_id = CallIdField(max_length=255)
    tool_name = models.CharField(max_length=200, blank=True, default="")

    objects = EventQuerySet.as_manager()

    class Meta:
        # Search by tool name is a substring match (icontains), which no b-tree serves.
        indexes = [models.Index(fields=["session", "call_id", "seq"], name="sighting_call_id_idx")]

    def save(self, *args, **kwargs):
        if not self._state.adding:
            raise AppendOnlyViolation("call sightings are append-only")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise AppendOnlyViolation("call sightings are append-only")


class IdempotentRequest(models.Model):
    """The first answer to a request sent with an Idempotency-Key."""

    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="idempotent_requests")
    key = models.CharField(max_length=255)
    body_sha256 = models.CharField(max_length=64)
    response = models.JSONField()
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["session", "key"], name="idempotency_session_key_unique")]
