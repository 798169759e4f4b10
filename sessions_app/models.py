"""Storage of session logs.

`Event` rows are append-only: the model layer refuses every update and
delete (instance save of an existing row, instance delete, queryset update,
delete and bulk_update). The semantics live in `sessions_app.log`; these
models only persist them plus a summary that lists and filters can read
without scanning events.
"""

from __future__ import annotations

import hashlib
import secrets

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import RegexValidator
from django.db import models
from django.db.models import Q
from django.utils import timezone
from django.utils.functional import cached_property

from sessions_app.log import events as log_events
from sessions_app.log import recovery as log_recovery

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


class Project(models.Model):
    """A team's room: every session belongs to one, and people see only their projects' sessions (sessions_app.access)."""

    DEFAULT_SLUG = "default"

    slug = models.SlugField(max_length=64, unique=True, help_text="Short name used in URLs and the CLI (--project)")
    name = models.CharField(max_length=200)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.name or self.slug

    @classmethod
    def default(cls) -> "Project":
        """The project of sessions created with no project named (the CLI, the demo, `create_token`)."""
        project, _ = cls.objects.get_or_create(slug=cls.DEFAULT_SLUG, defaults={"name": "Default"})
        return project


class Role(models.TextChoices):
    """What a member may do in a project; each role holds the rights of those before it (access.ROLE_CAPABILITIES)."""

    VIEWER = "viewer", "Viewer: reads sessions"
    MEMBER = "member", "Member: also creates sessions, appends and forks"
    OPERATOR = "operator", "Operator: also recovers and patches"
    ADMIN = "admin", "Admin: also manages members and tokens, reads the audit log"


class Membership(models.Model):
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.MEMBER)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["project", "user"], name="membership_project_user_unique")]
        ordering = ["project", "user"]

    def __str__(self) -> str:
        return f"{self.user} ({self.role} of {self.project.slug})"


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
    # When a recovery last closed this session's open turns.
    recovered_at = models.DateTimeField(null=True, blank=True)
    # Set when the automatic worker left this session for a person because its
    # agent passed its policy's hourly limit ("repeated failures").
    repeated_failures_at = models.DateTimeField(null=True, blank=True)
    # The event_count at which the worker last found this crash unsafe to restart: it looks
    # again only once the log grows, so stuck sessions do not crowd out new crashes.
    auto_checked_count = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["-last_activity_at", "-id"]
        indexes = [
            models.Index(fields=["-last_activity_at", "-id"], name="session_activity_idx"),
            models.Index(fields=["project", "agent_name", "-created_at"], name="session_agent_idx"),
            models.Index(fields=["interrupted", "-last_activity_at", "-id"], name="session_interrupted_idx"),
            models.Index(fields=["project", "-last_activity_at", "-id"], name="session_project_activity_idx"),
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
    # never deleted (PROTECT still refuses it in the ORM) and events are only
    # written by services.py under the session's lock or in the transaction
    # that created the fork, so the key cannot dangle.
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
    """How bad an unknown outcome of a tool is: ranks what a person checks first.

    Never changes the log's risk value (session-log.md section 8).
    """

    READ_ONLY = "read_only"
    IDEMPOTENT = "idempotent"
    EXTERNAL_EFFECT = "external_effect"
    CLASSES = [
        (READ_ONLY, "Read-only: safe to retry"),
        (IDEMPOTENT, "Idempotent or duplicate-detecting"),
        (EXTERNAL_EFFECT, "External effect: never retry without a human"),
    ]

    pattern = models.CharField(
        max_length=200, unique=True, help_text="Tool name or shell-style pattern, e.g. send_* or stripe.*"
    )
    side_effect = models.CharField(max_length=20, choices=CLASSES)
    note = models.CharField(max_length=300, blank=True, default="")

    class Meta:
        verbose_name_plural = "tool policies"
        ordering = ["pattern"]

    def __str__(self) -> str:
        return f"{self.pattern} → {self.side_effect}"


class IdempotentRequest(models.Model):
    """The first answer to a request sent with an Idempotency-Key."""

    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="idempotent_requests")
    key = models.CharField(max_length=255)
    body_sha256 = models.CharField(max_length=64)
    response = models.JSONField()
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["session", "key"], name="idempotency_session_key_unique")]


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class Scope(models.TextChoices):
    """What a token may do; its owner's role in the token's project bounds it too (access.py)."""

    READ = "read", "read sessions, events, exports and plans; open streams"
    APPEND = "append", "create and import sessions, append events"
    FORK = "fork", "fork sessions"
    RECOVER = "recover", "apply recovery plans and dangling-call patches"
    METRICS = "metrics", "scrape metrics (site-level tokens only)"


class ApiTokenQuerySet(models.QuerySet):
    def usable(self, now=None):
        """Tokens that authenticate now: not revoked, not expired, their owner active."""
        now = now or timezone.now()
        return self.filter(revoked_at__isnull=True, user__is_active=True).filter(
            Q(expires_at__isnull=True) | Q(expires_at__gt=now)
        )


class ApiToken(models.Model):
    """A bearer token of one project (or of the site, for `metrics`); only its SHA-256 is stored.

    Revoked tokens are kept (revoked_at) so the audit log and the token list
    can still name them.
    """

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    project = models.ForeignKey(
        Project, null=True, blank=True, on_delete=models.CASCADE, related_name="tokens",
        help_text="None: a site-level token, which may only carry the metrics scope",
    )
    scopes = models.JSONField(default=list, blank=True)
    name = models.CharField(max_length=100, blank=True, default="")
    token_sha256 = models.CharField(max_length=64, unique=True)
    # The first characters, so a person can tell tokens apart in lists.
    prefix = models.CharField(max_length=12)
    created_at = models.DateTimeField(default=timezone.now)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    expires_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    objects = ApiTokenQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        label = f" {self.name}" if self.name else ""
        return f"{self.prefix}…{label} ({self.user})"

    @property
    def state(self) -> str:
        """active | expired | revoked, as lists show it."""
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at is not None and self.expires_at <= timezone.now():
            return "expired"
        return "active"

    # How stale last_used_at may get: a write per request would cost more than it tells.
    LAST_USED_RESOLUTION_SECONDS = 60

    def mark_used(self) -> None:
        """Record use (at most once a minute per token): the API and the streams call it on each authentication."""
        now = timezone.now()
        if self.last_used_at is None or (now - self.last_used_at).total_seconds() > self.LAST_USED_RESOLUTION_SECONDS:
            ApiToken.objects.filter(pk=self.pk).update(last_used_at=now)
            self.last_used_at = now

    @classmethod
    def usable_for(cls, secret: str) -> "ApiToken | None":
        """The usable token with this secret (its user loaded), or None."""
        # token_sha256 is unique: at most one row, so no ORDER BY (first() would add one).
        return next(iter(cls.objects.usable().select_related("user", "project").filter(token_sha256=hash_token(secret))), None)

    @classmethod
    def issue(
        cls,
        user,
        *,
        project: Project | None,
        scopes,
        name: str = "",
        expires_at=None,
        created_by=None,
    ) -> tuple["ApiToken", str]:
        """Create a token; returns the row and the only copy of the secret.

        Use services.issue_token, which also checks the scopes and audits it.
        """
        secret = "tl_" + secrets.token_urlsafe(32)
        row = cls.objects.create(
            user=user,
            project=project,
            scopes=sorted(set(scopes)),
            name=name,
            expires_at=expires_at,
            created_by=created_by,
            token_sha256=hash_token(secret),
            prefix=secret[:10],
        )
        return row, secret


class AuditEntry(models.Model):
    """Who did what, when: recoveries, forks, tokens, memberships, refused requests. Append-only."""

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
