"""Who may see or change what: the one door every list, page, API operation,
stream, export, admin page and command goes through.

A person acts through an `Actor`: a user, and the API token they sent (if
any). In each project a member has a role; a role grants capabilities, and
a token grants the capabilities of its scopes, only in its own project and
never more than its owner's role there. Superusers are admins of every
project.

A session in a project the actor cannot read does not exist for them
(SessionNotFound, a 404), so ids of other teams' sessions are not revealed;
a session they can read but not change answers Forbidden (403), and the
refusal is audited.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from importlib import import_module

from django.conf import settings
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY, get_user_model
from django.db import connection
from django.db.models import QuerySet
from django.utils import timezone
from django.utils.crypto import constant_time_compare

from sessions_app import selectors
from sessions_app.lib import statements
from sessions_app.lib.errors import NoteNotFound, SessionNotFound
from sessions_app.log.events import format_time
from sessions_app.models import ApiToken, AuditEntry, Membership, Note, Project, Role, Scope, Session, hash_token

# Capabilities share the scopes' names: a token's scope is the capability it lends.
READ, APPEND, FORK, RECOVER, ADMIN = "read", "append", "fork", "recover", "admin"
CAPABILITY_WORDS = {
    READ: "read sessions",
    APPEND: "create sessions and append events",
    FORK: "fork sessions",
    RECOVER: "apply recoveries (operator)",
    ADMIN: "manage the project (admin)",
}
# Notes need no capabilities of their own: READ reads them, APPEND writes them (one's own;
# any note for a project admin whose token, if any, carries the append scope).

ROLE_CAPABILITIES: dict[str, frozenset[str]] = {
    Role.VIEWER: frozenset({READ}),
    Role.MEMBER: frozenset({READ, APPEND, FORK}),
    Role.OPERATOR: frozenset({READ, APPEND, FORK, RECOVER}),
    Role.ADMIN: frozenset({READ, APPEND, FORK, RECOVER, ADMIN}),
}
# Plain strings (not the Scope members), so messages and lists built from them read 'recover', not Scope.RECOVER.
PROJECT_SCOPES = frozenset(scope.value for scope in (Scope.READ, Scope.APPEND, Scope.FORK, Scope.RECOVER))
SITE_SCOPES = frozenset({Scope.METRICS.value})


class Forbidden(Exception):
    """The actor sees the session (or project) but may not do this with it."""

    def __init__(self, detail: str, *, capability: str):
        super().__init__(detail)
        self.detail, self.capability = detail, capability


@dataclass
class Actor:
    user: object
    token: ApiToken | GrantedToken | None = None
    _roles: dict[int, str] | None = field(default=None, repr=False)

    @property
    def name(self) -> str:
        if self.user is None or not self.user.is_authenticated:
            return "anonymous"
        return self.user.get_username()

    def roles(self) -> dict[int, str]:
        """project id -> role, read once per actor (superusers: admin of every project)."""
        if self._roles is None:
            user = self.user
            if user is None or not user.is_authenticated or not user.is_active:
                self._roles = {}
            elif user.is_superuser:
                self._roles = {pk: Role.ADMIN for pk in Project.objects.values_list("pk", flat=True)}
            else:
                # Compiled once per connection: every API request checks its actor's roles.
                self._roles = dict(statements.rows("actor_roles", _memberships_of, [user.pk]))
        return self._roles

    def capabilities(self, project_id: int) -> frozenset[str]:
        granted = ROLE_CAPABILITIES.get(self.roles().get(project_id), frozenset())
        if self.token is not None:
            if self.token.project_id != project_id:
                return frozenset()
            granted = granted & frozenset(self.token.scopes)
        return granted

    def can(self, project_id: int, capability: str) -> bool:
        return capability in self.capabilities(project_id)

    def project_ids(self, capability: str = READ) -> list[int]:
        return [pk for pk in self.roles() if self.can(pk, capability)]


def _memberships_of(user_id: int):
    # Unordered: Membership's default order joins projects, for nothing here.
    return Membership.objects.filter(user_id=user_id).order_by().values_list("project_id", "role")


def roles_of(user_ids) -> dict[int, dict[int, str]]:
    """Each active user's roles (project id -> role), as Actor.roles reads them one by one; for checks of many open sockets at once."""
    active = dict(get_user_model().objects.filter(pk__in=user_ids, is_active=True).values_list("pk", "is_superuser"))
    roles: dict[int, dict[int, str]] = {pk: {} for pk in active}
    if any(active.values()):
        every = {pk: Role.ADMIN for pk in Project.objects.values_list("pk", flat=True)}
        roles.update({pk: dict(every) for pk, superuser in active.items() if superuser})
    for user_id, project_id, role in Membership.objects.filter(user_id__in=[pk for pk, su in active.items() if not su]).values_list(
        "user_id", "project_id", "role"
    ):
        roles[user_id][project_id] = role
    return roles


@dataclass(slots=True)
class GrantedToken:
    """What an Actor and mark_used read of a token: its id, project and scopes, and
    last_used_at, now when it was used within the last LAST_USED_RESOLUTION_SECONDS
    (so mark_used writes nothing), else None. (An ApiToken instance cost more to
    build than the rest of the check.)"""

    pk: int
    project_id: int | None
    scopes: list[str]
    last_used_at: datetime | None
    LAST_USED_RESOLUTION_SECONDS = ApiToken.LAST_USED_RESOLUTION_SECONDS
    mark_used = ApiToken.mark_used  # one rule for both


def locked_session_for_token(secret: str, session_id: str, capability: str) -> tuple[Session, GrantedToken] | None:
    """The session, locked for the caller's transaction, and the usable token with this secret,
    when that token may do `capability` with it; None when it may not, or either does not exist.

    The append lane's check and the append's locked read in one statement: on
    PostgreSQL a check of its own before the append was a sixth of the
    database's time per append (an ORM query costs more to build than to
    run; three of them were a third of a single append). The same rule as
    ApiToken.usable_for and Actor.can: tests pin the two together. Nothing is
    written, and a refusal is not audited: the lane leaves refusals to the API.
    """
    now = timezone.now()
    adapt_time = connection.ops.adapt_datetimefield_value
    found = statements.get_for_update_joined(
        Session,
        session_id,
        columns=_TOKEN_COLUMNS,
        joins=_token_joins(),
        params=[adapt_time(now - timedelta(seconds=ApiToken.LAST_USED_RESOLUTION_SECONDS)), hash_token(secret), adapt_time(now), True],
    )
    if found is None:
        return None
    session, (token_id, token_project, scopes, user_id, superuser, role, used_recently) = found
    if token_id is None or user_id is None:  # no usable token with this secret, or its user is inactive
        return None
    token = GrantedToken(token_id, token_project, _SCOPES_FIELD.from_db_value(scopes, None, connection), now if used_recently else None)
    actor = Actor(user=None, token=token, _roles={session.project_id: Role.ADMIN if superuser else role})
    return (session, token) if actor.can(session.project_id, capability) else None


def _table(model) -> str:
    return connection.ops.quote_name(model._meta.db_table)


_SCOPES_FIELD = ApiToken._meta.get_field("scopes")
_TOKEN_COLUMNS = "t.id, t.project_id, t.scopes, u.id, u.is_superuser, m.role, (t.last_used_at IS NOT NULL AND t.last_used_at > %s)"


@functools.cache
def _token_joins() -> str:
    return f"""
LEFT JOIN {_table(ApiToken)} t ON t.token_sha256 = %s AND t.revoked_at IS NULL AND (t.expires_at IS NULL OR t.expires_at > %s)
LEFT JOIN {_table(get_user_model())} u ON u.id = t.user_id AND u.is_active = %s
LEFT JOIN {_table(Membership)} m ON m.user_id = t.user_id AND m.project_id = {_table(Session)}.project_id
"""


def actor_of(request) -> Actor:
    """The request's actor (cached on it): its user, and the API token that authenticated it."""
    actor = getattr(request, "turnlog_actor", None)
    if actor is None or actor.user is not request.user:
        actor = Actor(user=request.user, token=getattr(request, "api_token", None))
        request.turnlog_actor = actor
    return actor


def visible_sessions(actor: Actor, capability: str = READ) -> QuerySet[Session]:
    return Session.objects.filter(project_id__in=actor.project_ids(capability))


def projects(actor: Actor, capability: str = READ) -> QuerySet[Project]:
    return Project.objects.filter(pk__in=actor.project_ids(capability))


def session_for(actor: Actor, session_id: str, capability: str = READ, *, related: bool = True) -> Session:
    """The session if the actor may do `capability` with it (with its parent and project read in
    the same query unless not `related`: selectors.get_session).

    SessionNotFound when it does not exist or the actor may do nothing in its
    project (the refusal is audited for that project);
    Forbidden when they can read it but not this.
    """
    session = selectors.get_session(session_id, related=related)
    if not actor.capabilities(session.project_id):  # nothing at all there: as if it did not exist
        audit_denied(actor, project_id=session.project_id, target=session.id, capability=capability)
        raise SessionNotFound(session_id)
    if not actor.can(session.project_id, capability):
        audit_denied(actor, project_id=session.project_id, target=session.id, capability=capability)
        raise Forbidden(refusal(actor, capability), capability=capability)
    return session


def note_for(actor: Actor, note_id: int, *, change: bool = False) -> Note:
    """The note (with its session) if the actor may read it, or with `change` edit or delete it.

    NoteNotFound when it does not exist or the actor may do nothing in its
    session's project; Forbidden when they may read it but not change it:
    changing needs APPEND (the role's, and the token's `append` scope) and
    either the note's authorship or the project's admin role. An imported
    note has no local author: only admins change it. Refusals are audited.
    """
    note = selectors.get_note(note_id)
    project_id, target = note.session.project_id, f"note {note.pk} of {note.session_id}"
    if not actor.capabilities(project_id):
        audit_denied(actor, project_id=project_id, target=target, capability=READ)
        raise NoteNotFound(note_id)
    if not change:
        return note
    if not actor.can(project_id, APPEND):
        audit_denied(actor, project_id=project_id, target=target, capability=APPEND)
        raise Forbidden(refusal(actor, APPEND), capability=APPEND)
    is_author = note.author_id is not None and actor.user is not None and note.author_id == actor.user.pk
    if not is_author and ADMIN not in ROLE_CAPABILITIES.get(actor.roles().get(project_id), frozenset()):
        audit_denied(actor, project_id=project_id, target=target, capability=ADMIN)
        raise Forbidden(
            f"note {note.pk} is {note.author_name}'s: only its author or an admin of the project may change it", capability=ADMIN
        )
    return note


def project_for(actor: Actor, slug: str | None, capability: str) -> Project:
    """The project a new session goes into (create, import).

    `slug` names it; without one, the token's project, else the one project
    where the actor may do this. ProjectNotFound / Forbidden / ProjectRequired otherwise.
    """
    if slug is None and actor.token is not None and actor.token.project_id is not None:
        project = actor.token.project
    elif slug is None:
        allowed = list(projects(actor, capability)[:2])
        if len(allowed) != 1:
            raise ProjectRequired(
                "name the project (`project`): you may "
                + (f"{CAPABILITY_WORDS[capability]} in more than one" if allowed else f"{CAPABILITY_WORDS[capability]} in none")
            )
        return allowed[0]
    else:
        # A slug holding NUL names no project (and PostgreSQL cannot be asked about it).
        project = Project.objects.filter(slug=slug).first() if "\x00" not in slug else None
        if project is None or not actor.capabilities(project.pk):
            if project is not None:
                audit_denied(actor, project_id=project.pk, target=f"project {slug}", capability=capability)
            raise ProjectNotFound(slug)
    if not actor.can(project.pk, capability):
        audit_denied(actor, project_id=project.pk, target=f"project {project.slug}", capability=capability)
        raise Forbidden(refusal(actor, capability, project=project), capability=capability)
    return project


class ProjectNotFound(Exception):
    def __init__(self, slug: str):
        super().__init__(f"project {slug!r} does not exist or you are not a member")


class ProjectRequired(Exception):
    pass


def refusal(actor: Actor, capability: str, *, project: Project | None = None) -> str:
    """Why the actor may not: their role, or their token's scopes."""
    where = f" in project {project.slug}" if project is not None else ""
    if actor.token is not None and capability not in actor.token.scopes:
        return f"this token may not {CAPABILITY_WORDS[capability]}: it lacks the {capability!r} scope"
    return f"your role{where} may not {CAPABILITY_WORDS[capability]}"


def token_refusal(secret: str | None = None, *, pk: int | None = None) -> str:
    """Why a bearer token (by its secret, or its row's pk) does not authenticate, in a few words (a
    401's detail, a 4401's close reason, which holds at most 123 bytes): revoked, expired, its user
    deactivated, or unknown. Only whoever holds the token learns this: its prefix and dates are theirs already."""
    now = timezone.now()
    rows = ApiToken.objects.select_related("user")
    row = next(iter(rows.filter(pk=pk) if pk is not None else rows.filter(token_sha256=hash_token(secret or ""))), None)
    if row is None:
        return "unknown token"
    if row.revoked_at is not None:
        return f"token {row.prefix}… was revoked at {format_time(row.revoked_at)}"
    if row.expires_at is not None and row.expires_at <= now:
        return f"token {row.prefix}… expired at {format_time(row.expires_at)}"
    if not row.user.is_active:
        return f"token {row.prefix}…'s user is deactivated"
    return "token not usable"


# A refusal repeated within this many seconds is recorded once: anyone who knows a session id
# of another project could otherwise fill that project's audit log with refusals.
DENIAL_RECORD_SECONDS = 60


def audit_denied(actor: Actor, *, project_id: int | None, target: str, capability: str) -> None:
    """Record a refused authorisation, once per actor (user and token), target, capability and DENIAL_RECORD_SECONDS
    (authenticated actors only: anonymous refusals are 401s, not recorded)."""
    if actor.user is None or not actor.user.is_authenticated:
        return
    recorded = AuditEntry.objects.filter(
        project_id=project_id,
        created_at__gt=timezone.now() - timedelta(seconds=DENIAL_RECORD_SECONDS),
        action=AuditEntry.ACCESS_DENIED,
        actor=actor.user,
        target=target,
        detail__capability=capability,
    )
    # The actor is the user and the token they sent (a login and a token are told apart).
    recorded = recorded.filter(detail__token=actor.token.prefix) if actor.token is not None else recorded.exclude(detail__has_key="token")
    if recorded.exists():
        return
    AuditEntry.objects.create(
        project_id=project_id,
        actor=actor.user,
        actor_name=actor.name,
        action=AuditEntry.ACCESS_DENIED,
        target=target,
        detail={"capability": capability, **({"token": actor.token.prefix} if actor.token is not None else {})},
    )


def role_scopes(role: str) -> frozenset[str]:
    """The scopes a token of a member with this role can use."""
    return ROLE_CAPABILITIES[role] & PROJECT_SCOPES


# Credentials that may have ended since a stream opened (dashboard.live.credentials asks) -------


# Open streams ask before each frame they send: these run a few times a second per process, so their
# statements are compiled once per connection (statements.rows) and their rules applied here; building
# the same queries with the ORM cost more than a round's queries themselves (~0.7 ms a round).


def usable_token_ids(token_ids: set[int]) -> set[int]:
    """Those of these tokens that still authenticate: not revoked, not expired, their owner active (ApiToken.usable's rule)."""
    if not token_ids:
        return set()
    ids = _in_shape(sorted(token_ids), lambda n: -1 - n)
    now = timezone.now()
    return {
        pk
        for pk, revoked_at, expires_at, active in statements.rows(f"token_states:{len(ids)}", _token_states, ids)
        if revoked_at is None and active and (expires_at is None or expires_at > now)
    }


def _token_states(*ids: int):
    return ApiToken.objects.filter(pk__in=ids).order_by().values_list("pk", "revoked_at", "expires_at", "user__is_active")


def _in_shape(values: list, filler) -> list:
    """`values`, then fillers that match no row up to the next power of two: an IN (...) of a compiled
    statement then takes a few shapes, not one per count."""
    size = 1
    while size < len(values):
        size *= 2
    return values + [filler(n) for n in range(size - len(values))]


def login_sessions(keys: set[str]) -> dict[str, dict]:
    """The data of each of these login sessions that still exists and has not expired."""
    store = import_module(settings.SESSION_ENGINE).SessionStore
    if hasattr(store, "get_model_class"):  # the database backends: one query for all
        now = timezone.now()
        # "-" is in no session key (lowercase letters and digits).
        padded = _in_shape(sorted(keys), lambda n: f"-{n}")
        rows = statements.rows(f"login_sessions:{len(padded)}", _login_rows, padded)
        return {key: _decoded(settings.SESSION_ENGINE, settings.SECRET_KEY, data) for key, data, expires in rows if expires > now}
    return {key: data for key in keys if (data := store(session_key=key).load())}


def _login_rows(*keys: str):
    model = import_module(settings.SESSION_ENGINE).SessionStore.get_model_class()
    return model.objects.filter(session_key__in=keys).order_by().values_list("session_key", "session_data", "expire_date")


def _login_users(*ids: int):
    return get_user_model().objects.filter(pk__in=ids).order_by().values_list("pk", "password", "is_active")


@functools.lru_cache(maxsize=4096)
def _decoded(engine: str, secret_key: str, data: str) -> dict:
    """A login session's data, decoded once (~45 µs a decode). Callers only read it.
    The engine and key are part of the key (a decode depends on them)."""
    return import_module(engine).SessionStore().decode(data)


@functools.lru_cache(maxsize=4096)
def _session_auth_hashes(password: str, secret_key: str, fallbacks: tuple[str, ...]) -> tuple[str, ...]:
    """The session auth hashes a login of a user with this password holds: the current key's, then the fallbacks'."""
    user = get_user_model()(password=password)  # the hash reads the password alone
    return (user.get_session_auth_hash(), *(user._get_session_auth_hash(secret=secret) for secret in fallbacks))


def still_logged_in(data: dict, user_id: int, password: str, is_active: bool) -> bool:
    """Whether a login session still authenticates the user, as django.contrib.auth.get_user decides it
    (same active user and backend, and the session auth hash of their current password, or a fallback key's)."""
    if not is_active or data.get(SESSION_KEY) != str(user_id) or data.get(BACKEND_SESSION_KEY) not in settings.AUTHENTICATION_BACKENDS:
        return False
    given = data.get(HASH_SESSION_KEY) or ""
    hashes = _session_auth_hashes(password, settings.SECRET_KEY, tuple(settings.SECRET_KEY_FALLBACKS))
    return any(constant_time_compare(given, known) for known in hashes)


def ended_logins(logins: set[tuple[str, int]]) -> set[tuple[str, int]]:
    """Those of these (login session key, user id) pairs whose login session no longer
    authenticates that user: logged out, expired, their password changed or the user deactivated (two queries for all)."""
    if not logins:
        return set()
    sessions = login_sessions({key for key, _ in logins})
    ids = _in_shape(sorted({user_id for _, user_id in logins}), lambda n: -1 - n)
    users = {pk: (password, active) for pk, password, active in statements.rows(f"login_users:{len(ids)}", _login_users, ids)}
    return {
        (key, user_id)
        for key, user_id in logins
        if key not in sessions or user_id not in users or not still_logged_in(sessions[key], user_id, *users[user_id])
    }
