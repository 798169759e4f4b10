"""Projects and who may act in them: memberships and roles, API tokens and their scopes."""

from __future__ import annotations

import hashlib
import re
import secrets

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import DEFAULT_DB_ALIAS, connections, models
from django.db.models import Q
from django.utils import timezone

from sessions_app.lib import statements

RETENTION_DAYS_MAX = 36500  # a hundred years: beyond it, keep them forever (leave it empty)


class Project(models.Model):
    """A team's room: every session belongs to one, and people see only their projects' sessions (sessions_app.selectors.access)."""

    DEFAULT_SLUG = "default"

    slug = models.SlugField(max_length=64, unique=True, help_text="Short name used in URLs and the CLI (--project)")
    name = models.CharField(max_length=200)
    created_at = models.DateTimeField(default=timezone.now)
    # How long sessions are kept after Session.retained_from (sessions_app/services/retention); None: forever.
    retention_days = models.PositiveIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1), MaxValueValidator(RETENTION_DAYS_MAX)],
        help_text=(
            "Delete sessions left alone for longer than this many days: no event received, note written or recovery"
            " since their creation or import (empty: keep them forever)"
        ),
    )  # fmt: skip
    # Lets the worker also recover a crash whose every unknown call a reconciler settled (section 8.2):
    # such a recovery appends the recovery-context message. Off by default; project admins set it.
    auto_recover_settled = models.BooleanField(
        default=False,
        help_text="Recover crashes without a person when a reconciler settled every call whose outcome was unknown",
    )

    # Moves on every change of the project's own model prices (ModelPrice): sessions whose stored cost was
    # computed before are recomputed by the worker (sessions_app/services/usage.py).
    prices_version = models.PositiveIntegerField(default=0, editable=False)

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


def _usable_token(now, token_sha256):
    """The query usable_for compiles."""
    return ApiToken.objects.usable(now).filter(token_sha256=token_sha256).values_list("pk", "user_id", "project_id")


# What ApiToken.issue makes ("tl_" and 32 random bytes in URL-safe base64): a token an operator chooses
# (TURNLOG_INIT_TOKEN) must look the same, so that every door and the token list read it alike.
TOKEN_PREFIX = "tl_"
TOKEN_FORMAT = re.compile(r"tl_[A-Za-z0-9_-]{43}\Z")


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
        """The usable token with this secret (its user and project loaded), or None.

        Every API request and stream authenticates here: its reads are compiled once per
        connection (statements), which the ORM's query building took several times longer than
        running them (docs/performance.md, "OTLP ingest"). The rule is `usable()`'s own.
        """
        now, token_sha256 = timezone.now(), hash_token(secret)
        bound_now = cls._meta.get_field("expires_at").get_db_prep_value(now, connections[DEFAULT_DB_ALIAS])
        # token_sha256 is unique: at most one row.
        found = statements.rows("usable_token", _usable_token, [now, token_sha256], bound=[bound_now, token_sha256])
        if not found:
            return None
        (pk, user_id, project_id), = found
        token = statements.get(cls, pk)
        user = statements.get(cls._meta.get_field("user").related_model, user_id)
        if token is None or user is None:  # gone since the first read
            return None
        token.user = user
        token.project = statements.get(Project, project_id) if project_id is not None else None
        return token

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
        secret: str | None = None,
    ) -> tuple["ApiToken", str]:
        """Create a token; returns the row and the only copy of the secret (a new random one unless given,
        in TOKEN_FORMAT).

        Use services.issue_token, which also checks the scopes and audits it.
        """
        secret = secret if secret is not None else TOKEN_PREFIX + secrets.token_urlsafe(32)
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
