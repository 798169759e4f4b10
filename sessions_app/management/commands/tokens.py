"""API tokens from the command line: list, create, revoke (each write audited, by "cli")."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from sessions_app import services
from sessions_app.management.database_copies import Database
from sessions_app.lib.params import BadParameter, decimal_int
from sessions_app.models import ApiToken, Project, Scope, hash_token
from sessions_app.selectors import access

EXPIRES_IN = re.compile(r"^(?P<count>[0-9]+)(?P<unit>[dh]?)$")
HOURS_PER_UNIT = {"d": 24, "": 24, "h": 1}  # a bare number counts days
# Anything longer than a prefix is taken for the secret itself: a leaked token can be revoked by pasting it.
PREFIX_MAX_LENGTH = ApiToken._meta.get_field("prefix").max_length


class Command(BaseCommand):
    help = "Manage API tokens: list, create (prints the secret once, alone on the last line), revoke."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        listing = sub.add_parser("list", help="usable tokens (with --all, also revoked and expired ones)")
        listing.add_argument("--project", help="only tokens of this project (slug)")
        listing.add_argument("--user", help="only tokens of this user")
        listing.add_argument("--all", dest="everything", action="store_true", help="include revoked and expired tokens")

        create = sub.add_parser("create", help="issue a token; the secret is shown once, alone on the last line")
        create.add_argument("--user", required=True, help="who the token acts as (a member of the project)")
        create.add_argument("--project", help="the token's project (slug); required unless --site")
        create.add_argument(
            "--scopes",
            help=f"comma-separated, among {', '.join(Scope.values)} (default: every scope the user's role allows)",
        )
        create.add_argument("--name", default="", help="what the token is for, shown in lists")
        create.add_argument("--expires-in", help="lifetime: 30d, 12h, or a number of days (default: no expiry)")
        create.add_argument(
            "--site", action="store_true", help="a site-level token (no project) for metrics scrapers; superusers only"
        )

        revoke = sub.add_parser("revoke", help="revoke a token at once (its open streams close within seconds)")
        revoke.add_argument("token", metavar="PREFIX_OR_ID", help="the token's id, its prefix (as listed), or the token itself")

    def handle(self, *args, action: str, **options):
        getattr(self, action)(**options)

    # list ---------------------------------------------------------------

    def list(self, *, project: str | None, user: str | None, everything: bool, **_):
        tokens = ApiToken.objects.all() if everything else ApiToken.objects.usable()
        if project is not None:
            tokens = tokens.filter(project=find_project(project))
        if user is not None:
            tokens = tokens.filter(user=find_user(user))
        tokens = list(tokens.select_related("user", "project"))
        if not tokens:
            self.stdout.write("No tokens." if everything else "No usable tokens (--all shows revoked and expired ones).")
            return
        header = ("ID", "PREFIX", "NAME", "USER", "PROJECT", "SCOPES", "STATE", "CREATED", "EXPIRES", "LAST USED")
        rows = [
            (
                str(token.pk),
                token.prefix,
                token.name or "-",
                token.user.get_username(),
                token.project.slug if token.project is not None else "(site)",
                ",".join(token.scopes) or "-",
                token_state(token),
                minutes(token.created_at),
                minutes(token.expires_at) if token.expires_at else "never",
                minutes(token.last_used_at) if token.last_used_at else "never",
            )
            for token in tokens
        ]
        widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
        for row in (header, *rows):
            self.stdout.write("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())

    # create -------------------------------------------------------------

    def create(self, *, user: str, project: str | None, scopes: str | None, name: str, expires_in: str | None, site: bool, **_):
        owner = find_user(user)
        if not owner.is_active:
            raise CommandError(f"user {user!r} is inactive: a token of theirs would not authenticate")
        if site and project is not None:
            raise CommandError("--site makes a token of no project: leave out --project")
        if not site and project is None:
            raise CommandError("--project SLUG is required (or --site for a site-level metrics token)")
        room = None if site else find_project(project)
        if scopes is not None:
            wanted = parse_scopes(scopes)
        elif room is None:
            wanted = set(access.SITE_SCOPES)
        else:
            role = access.Actor(user=owner).roles().get(room.pk)
            if role is None:
                raise CommandError(f"{user!r} is not a member of project {room.slug!r}: add them to it first")
            wanted = set(access.role_scopes(role))
        expires_at = timezone.now() + parse_lifetime(expires_in) if expires_in is not None else None
        try:
            token, secret = services.issue_token(user=owner, project=room, scopes=wanted, name=name, expires_at=expires_at)
        except services.InvalidScopes as error:
            raise CommandError(f"refused: {error}") from None
        where = f"project {room.slug!r}" if room is not None else "the site (no project)"
        until = f", expires {minutes(expires_at)}" if expires_at else ""
        self.stderr.write(
            f"New token {token.prefix} for {owner.get_username()!r} in {where}, scopes {', '.join(token.scopes)}{until},"
            f" in {Database.current()}. It is shown once; only its hash is stored:"
        )
        self.stdout.write(secret)

    # revoke -------------------------------------------------------------

    def revoke(self, *, token: str, **_):
        found = find_token(token)
        was = describe(found)
        if not services.revoke_token(token=found, by=None):
            self.stdout.write(f"Token {was} was already revoked ({minutes(found.revoked_at)}).")
            return
        self.stdout.write(
            f"Revoked token {was} in {Database.current()}: it answers 401 now, and its open streams close within seconds."
        )


def find_user(username: str):
    user = get_user_model().objects.filter(**{get_user_model().USERNAME_FIELD: username}).first()
    if user is None:
        raise CommandError(f"no user named {username!r}")
    return user


def find_project(slug: str) -> Project:
    project = Project.objects.filter(slug=slug).first()
    if project is None:
        known = ", ".join(Project.objects.values_list("slug", flat=True)) or "none"
        raise CommandError(f"no project {slug!r} (projects: {known})")
    return project


def find_token(given: str) -> ApiToken:
    """The one token with this id, prefix (or its start), or secret; CommandError naming the problem otherwise."""
    given = given.strip()
    tokens = ApiToken.objects.select_related("user", "project")
    try:
        token_id = decimal_int(given, name="the token id")
    except BadParameter as bad:
        raise CommandError(f"{bad}.") from None
    if token_id is not None:
        matches = list(tokens.filter(pk=token_id))
    elif len(given) > PREFIX_MAX_LENGTH:
        matches = list(tokens.filter(token_sha256=hash_token(given)))
    elif given:
        matches = list(tokens.filter(prefix__startswith=given)[:21])
    else:
        matches = []
    if not matches:
        raise CommandError(f"no token with the id or prefix {given!r} (see `tokens list --all`)")
    if len(matches) > 1:
        listed = "\n".join(f"  {describe(t)}" for t in matches[:20]) + ("\n  ..." if len(matches) > 20 else "")
        raise CommandError(f"the prefix {given!r} matches more than one token; give more of it, or the id:\n{listed}")
    return matches[0]


def describe(token: ApiToken) -> str:
    where = token.project.slug if token.project is not None else "site"
    label = f" {token.name!r}" if token.name else ""
    return f"{token.prefix} (id {token.pk}{label}, {token.user.get_username()}, {where}, {token_state(token)})"


def token_state(token: ApiToken) -> str:
    """As ApiToken.state, and "user inactive" for an active token whose owner cannot authenticate."""
    state = token.state
    return "user inactive" if state == "active" and not token.user.is_active else state


def parse_scopes(given: str) -> set[str]:
    scopes = {scope.strip() for scope in given.split(",") if scope.strip()}
    unknown = sorted(scopes - set(Scope.values))
    if unknown:
        raise CommandError(f"--scopes: unknown {', '.join(map(repr, unknown))}; the scopes are {', '.join(Scope.values)}")
    if not scopes:
        raise CommandError("--scopes: name at least one scope")
    return scopes


def parse_lifetime(given: str) -> timedelta:
    match = EXPIRES_IN.match(given.strip())
    if match is None or int(match["count"]) == 0:
        raise CommandError(f"--expires-in: {given!r} is not a lifetime like 30d, 12h or 90 (days), above 0")
    hours = int(match["count"]) * HOURS_PER_UNIT[match["unit"]]
    if hours > 24 * 365 * 100:
        raise CommandError(f"--expires-in: {given!r} is more than a hundred years; leave it out for no expiry")
    return timedelta(hours=hours)


def minutes(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%MZ")
