"""The headless first start: the first admin, project and token an operator names in TURNLOG_INIT_* variables,
applied by the migration step (`manage.py first_start`, run after every `migrate`) once, under a lock.

Applying it again changes nothing: an existing admin keeps their password, an existing project its settings, an
existing token is not issued twice. The password comes from a file, never from the environment; the token is a
secret the operator chose, in the format Turnlog's own tokens have (models.TOKEN_FORMAT).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from django.contrib.auth import get_user_model
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.core.validators import validate_slug
from django.db import connection, transaction

from sessions_app.models import TOKEN_FORMAT, ApiToken, Membership, Project, Role, Scope, hash_token
from sessions_app.selectors import access

from .access_admin import issue_token, set_membership

# Any fixed number: the one pg_advisory_xact_lock every migration step's first start takes.
LOCK_KEY = 0x7475726E6C6F67  # "turnlog"
VARIABLES = (
    "TURNLOG_INIT_ADMIN_USERNAME",
    "TURNLOG_INIT_ADMIN_PASSWORD_FILE",
    "TURNLOG_INIT_PROJECT",
    "TURNLOG_INIT_TOKEN",
    "TURNLOG_INIT_TOKEN_SCOPES",
)
TOKEN_NAME = "first start (TURNLOG_INIT_TOKEN)"


class InitError(ValueError):
    """A TURNLOG_INIT_* variable that cannot be applied; the message names it."""


@dataclass(frozen=True)
class FirstStart:
    admin_username: str
    password: str = ""  # read from TURNLOG_INIT_ADMIN_PASSWORD_FILE
    password_file: str = ""
    project_slug: str = ""  # empty: the default project
    token: str = ""
    scopes: frozenset[str] = frozenset()


def plan_from(environ: Mapping[str, str]) -> FirstStart | None:
    """What the TURNLOG_INIT_* variables of `environ` ask for, checked; None when none is set. InitError names
    the first variable that is wrong (a malformed token, an unknown scope, a password file that cannot be read)."""
    username = environ.get("TURNLOG_INIT_ADMIN_USERNAME", "").strip()
    password_file = environ.get("TURNLOG_INIT_ADMIN_PASSWORD_FILE", "").strip()
    slug = environ.get("TURNLOG_INIT_PROJECT", "").strip()
    token = environ.get("TURNLOG_INIT_TOKEN", "").strip()
    given_scopes = environ.get("TURNLOG_INIT_TOKEN_SCOPES", "").strip()
    if not (username or password_file or slug or token or given_scopes):
        return None
    if not username:
        raise InitError("TURNLOG_INIT_ADMIN_USERNAME is not set: the first start's project and token need their admin")
    if not password_file:
        raise InitError(
            "TURNLOG_INIT_ADMIN_PASSWORD_FILE is not set: name a file holding the admin's password"
            " (never the password itself in the environment)"
        )
    password = read_password(password_file)
    try:
        validate_password(password, get_user_model()(username=username))
    except ValidationError as error:
        raise InitError(f"TURNLOG_INIT_ADMIN_PASSWORD_FILE: the password in {password_file} is refused: {' '.join(error.messages)}") from None
    if slug:
        try:
            validate_slug(slug)
        except ValidationError:
            raise InitError(f"TURNLOG_INIT_PROJECT is {slug!r}: a project's slug is letters, digits, - and _") from None
        if len(slug) > Project._meta.get_field("slug").max_length:
            raise InitError(f"TURNLOG_INIT_PROJECT is longer than {Project._meta.get_field('slug').max_length} characters")
    if given_scopes and not token:
        raise InitError("TURNLOG_INIT_TOKEN_SCOPES is set without TURNLOG_INIT_TOKEN: there is no token to give them")
    if token and not TOKEN_FORMAT.match(token):
        # The value is a secret: the message says what it should be, never what it is.
        raise InitError(
            f"TURNLOG_INIT_TOKEN is not a Turnlog token ({len(token)} characters): it must be tl_ and 43 characters"
            " among A-Z a-z 0-9 - _; make one with: python -c 'import secrets; print(\"tl_\" + secrets.token_urlsafe(32))'"
        )
    scopes = access.role_scopes(Role.ADMIN)
    if given_scopes:
        scopes = frozenset(scope.strip() for scope in given_scopes.split(",") if scope.strip())
        unknown = sorted(scopes - set(Scope.values))
        if unknown or not scopes:
            raise InitError(
                f"TURNLOG_INIT_TOKEN_SCOPES: unknown {', '.join(map(repr, unknown)) or 'none given'};"
                f" a project token's scopes are {', '.join(sorted(access.PROJECT_SCOPES))}"
            )
        if not scopes <= access.PROJECT_SCOPES:
            raise InitError(
                f"TURNLOG_INIT_TOKEN_SCOPES: {', '.join(sorted(scopes - access.PROJECT_SCOPES))} is a site token's scope;"
                f" a project token's scopes are {', '.join(sorted(access.PROJECT_SCOPES))}"
            )
    return FirstStart(username, password, password_file, slug, token, frozenset(scopes))


def read_password(path: str) -> str:
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        raise InitError(f"TURNLOG_INIT_ADMIN_PASSWORD_FILE names {path}, which does not exist") from None
    except (OSError, UnicodeDecodeError) as error:
        raise InitError(f"TURNLOG_INIT_ADMIN_PASSWORD_FILE names {path}, which cannot be read: {error}") from None
    password = text.removesuffix("\n").removesuffix("\r")  # the newline an editor or `echo` ends a file with
    if not password:
        raise InitError(f"TURNLOG_INIT_ADMIN_PASSWORD_FILE names {path}, which is empty")
    return password


def apply_first_start(*, plan: FirstStart) -> list[str]:
    """Create what `plan` names and does not exist yet, in one transaction under a lock that every other first
    start waits for; returns what it did and what it left, one line each (never a secret)."""
    with transaction.atomic():
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_xact_lock(%s)", [LOCK_KEY])
        # SQLite: the settings' IMMEDIATE transactions hold the database's write lock from BEGIN.
        done: list[str] = []
        users = get_user_model()
        user = users.objects.filter(**{users.USERNAME_FIELD: plan.admin_username}).first()
        if user is None:
            user = users.objects.create_superuser(username=plan.admin_username, email="", password=plan.password)
            done.append(f"created the admin {plan.admin_username!r} (a superuser), password from {plan.password_file}")
        else:
            done.append(f"the user {plan.admin_username!r} exists: left as it is, its password not reset")
        if plan.project_slug:
            project, created = Project.objects.get_or_create(slug=plan.project_slug, defaults={"name": plan.project_slug})
            done.append(f"{'created' if created else 'found'} the project {project.slug!r}")
        else:
            project = Project.default()
        # A member row even for a superuser (who could act without one): the project's members page names them.
        if not Membership.objects.filter(project=project, user=user, role=Role.ADMIN).exists():
            set_membership(project=project, user=user, role=Role.ADMIN)
            done.append(f"made {plan.admin_username!r} an admin of {project.slug!r}")
        if plan.token:
            existing = ApiToken.objects.filter(token_sha256=hash_token(plan.token)).select_related("project").first()
            if existing is None:
                row, _ = issue_token(user=user, project=project, scopes=plan.scopes, name=TOKEN_NAME, secret=plan.token)
                done.append(f"issued the token {row.prefix}... in {project.slug!r} with the scopes {', '.join(row.scopes)}")
            else:
                where = existing.project.slug if existing.project is not None else "the site"
                done.append(f"the token {existing.prefix}... exists ({existing.state}, in {where!r}): not issued again")
        return done
