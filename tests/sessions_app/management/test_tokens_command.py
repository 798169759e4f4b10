"""`manage.py tokens list|create|revoke`: writes through services (audited as "cli"), clear refusals."""

from __future__ import annotations

import io
import time
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.utils import timezone
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from sessions_app import services
from sessions_app.models import ApiToken, AuditEntry, Project, Role, hash_token
from tests.access import member, token_for
from tests.conftest import ApiClient
from tests.servers import DaphneServer

pytestmark = pytest.mark.django_db


def run(*args) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("tokens", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def refused(*args) -> str:
    with pytest.raises(CommandError) as refusal:
        run(*args)
    return str(refusal.value)


def secret_of(output: str) -> str:
    return output.strip().splitlines()[-1]


def row(secret: str) -> ApiToken:
    return ApiToken.objects.select_related("user", "project").get(token_sha256=hash_token(secret))


@pytest.fixture
def alice(django_user_model):
    user = django_user_model.objects.create_user("alice")
    member(user)
    return user


@pytest.fixture
def team():
    return Project.objects.create(slug="team", name="Team")


# create -------------------------------------------------------------------


def test_create_prints_the_secret_alone_on_the_last_line_with_the_roles_scopes(alice):
    out, err = run("create", "--user", "alice", "--project", "default", "--name", "ci")
    secret = secret_of(out)
    assert out == secret + "\n"
    token = row(secret)
    assert (token.user, token.project, token.name) == (alice, Project.default(), "ci")
    assert token.scopes == ["append", "fork", "read"]
    assert token.expires_at is None and token.created_by is None
    assert token.prefix in err and "shown once" in err
    assert ApiClient(secret).get("/api/v1/sessions").status_code == 200
    created = AuditEntry.objects.get(action=AuditEntry.TOKEN_CREATED)
    assert (created.project, created.actor, created.actor_name, created.target) == (Project.default(), None, "cli", token.prefix)
    assert created.detail["user"] == "alice" and created.detail["scopes"] == token.scopes


def test_create_defaults_to_the_scopes_of_the_users_role_there(django_user_model, team):
    viewer = django_user_model.objects.create_user("vera")
    member(viewer, Role.VIEWER, team)
    assert row(secret_of(run("create", "--user", "vera", "--project", "team")[0])).scopes == ["read"]
    operator = django_user_model.objects.create_user("otto")
    member(operator, Role.OPERATOR, team)
    assert row(secret_of(run("create", "--user", "otto", "--project", "team")[0])).scopes == ["append", "fork", "read", "recover"]


def test_create_with_fewer_scopes_gives_a_token_that_may_do_only_those(alice):
    secret = secret_of(run("create", "--user", "alice", "--project", "default", "--scopes", "read")[0])
    assert row(secret).scopes == ["read"]
    api = ApiClient(secret)
    assert api.get("/api/v1/sessions").status_code == 200
    answer = api.post("/api/v1/sessions", {"id": "not-allowed"})
    assert answer.status_code == 403 and answer.json()["error"] == "forbidden"


@pytest.mark.parametrize(("given", "lifetime"), [("30d", timedelta(days=30)), ("12h", timedelta(hours=12)), ("7", timedelta(days=7))])
def test_create_with_an_expiry(alice, given, lifetime):
    before = timezone.now()
    token = row(secret_of(run("create", "--user", "alice", "--project", "default", "--expires-in", given)[0]))
    assert before + lifetime <= token.expires_at <= timezone.now() + lifetime
    assert AuditEntry.objects.get(action=AuditEntry.TOKEN_CREATED).detail["expires_at"] is not None


def test_a_site_token_carries_metrics_and_only_a_superuser_may_hold_one(django_user_model, alice):
    django_user_model.objects.create_superuser("root", password="x")
    token = row(secret_of(run("create", "--user", "root", "--site")[0]))
    assert (token.project, token.scopes) == (None, ["metrics"])
    assert AuditEntry.objects.get(action=AuditEntry.TOKEN_CREATED).project is None
    assert "superuser" in refused("create", "--user", "alice", "--site")
    assert "metrics" in refused("create", "--user", "root", "--site", "--scopes", "read")


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--user", "nobody", "--project", "default"], "no user named 'nobody'"),
        (["--user", "alice", "--project", "nowhere"], "no project 'nowhere' (projects: default)"),
        (["--user", "alice"], "--project SLUG is required"),
        (["--user", "alice", "--project", "default", "--site"], "leave out --project"),
        (["--user", "alice", "--project", "default", "--scopes", "recover"], "may not use the scopes ['recover']"),
        (["--user", "alice", "--project", "default", "--scopes", "read,write"], "--scopes: unknown 'write'"),
        (["--user", "alice", "--project", "default", "--scopes", ","], "--scopes: name at least one scope"),
        (["--user", "alice", "--project", "default", "--expires-in", "2w"], "--expires-in: '2w' is not a lifetime"),
        (["--user", "alice", "--project", "default", "--expires-in", "0d"], "--expires-in: '0d' is not a lifetime"),
        (["--user", "alice", "--project", "default", "--expires-in", "-3"], "--expires-in: '-3' is not a lifetime"),
        (["--user", "alice", "--project", "default", "--expires-in", "99999999"], "more than a hundred years"),
    ],
)
def test_create_refuses_clearly_and_writes_nothing(alice, args, says):
    assert says in refused("create", *args)
    assert not ApiToken.objects.exists()
    assert not AuditEntry.objects.filter(action=AuditEntry.TOKEN_CREATED).exists()


def test_create_refuses_a_non_member_and_an_inactive_user(django_user_model, team, alice):
    assert "'alice' is not a member of project 'team'" in refused("create", "--user", "alice", "--project", "team")
    assert "alice is not a member of team" in refused("create", "--user", "alice", "--project", "team", "--scopes", "read")
    alice.is_active = False
    alice.save()
    assert "inactive" in refused("create", "--user", "alice", "--project", "default")
    assert not ApiToken.objects.exists()


# list ---------------------------------------------------------------------


def table(*args) -> list[list[str]]:
    out, _ = run("list", *args)
    return [line.split() for line in out.strip().splitlines()]


def test_list_shows_usable_tokens_and_with_all_revoked_and_expired_ones(alice, django_user_model, team):
    kept = row(token_for(alice, name="kept"))
    revoked = row(token_for(alice, name="gone"))
    expired = row(token_for(alice, name="old"))
    bob = django_user_model.objects.create_user("bob")
    elsewhere = row(token_for(bob, Role.VIEWER, team, name="teamtok", expires_at=timezone.now() + timedelta(days=2)))
    services.revoke_token(token=revoked)
    ApiToken.objects.filter(pk=expired.pk).update(expires_at=timezone.now() - timedelta(minutes=1))

    header, *rows = table()
    assert header == ["ID", "PREFIX", "NAME", "USER", "PROJECT", "SCOPES", "STATE", "CREATED", "EXPIRES", "LAST", "USED"]
    assert {r[1] for r in rows} == {kept.prefix, elsewhere.prefix}
    by_prefix = {r[1]: r for r in rows}
    assert by_prefix[kept.prefix][:7] == [str(kept.pk), kept.prefix, "kept", "alice", "default", "append,fork,read", "active"]
    assert by_prefix[kept.prefix][-2:] == ["never", "never"]  # no expiry, never used
    assert by_prefix[elsewhere.prefix][2:7] == ["teamtok", "bob", "team", "read", "active"]
    assert by_prefix[elsewhere.prefix][9] == elsewhere.expires_at.strftime("%Y-%m-%d")

    states = {r[1]: r[6] for r in table("--all")[1:]}
    assert states == {kept.prefix: "active", revoked.prefix: "revoked", expired.prefix: "expired", elsewhere.prefix: "active"}


def test_list_filters_by_project_and_user(alice, django_user_model, team):
    mine = row(token_for(alice))
    bob = django_user_model.objects.create_user("bob")
    bobs = row(token_for(bob, Role.MEMBER, team))
    assert [r[1] for r in table("--project", "team")[1:]] == [bobs.prefix]
    assert [r[1] for r in table("--user", "alice")[1:]] == [mine.prefix]
    assert run("list", "--user", "alice", "--project", "team")[0] == "No usable tokens (--all shows revoked and expired ones).\n"
    assert "no project 'elsewhere'" in refused("list", "--project", "elsewhere")
    assert "no user named 'carol'" in refused("list", "--user", "carol")


def test_list_shows_when_a_token_was_last_used(alice):
    token = row(token_for(alice))
    used = timezone.now().replace(year=2026, month=11, day=30, hour=9, minute=15)
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=used)
    assert table()[1][-2:] == ["2026-11-30", "09:15Z"]


# revoke -------------------------------------------------------------------


def test_revoke_by_prefix_refuses_the_token_at_once_and_is_audited(alice):
    secret = token_for(alice, name="ci")
    token = row(secret)
    out, _ = run("revoke", token.prefix)
    assert f"Revoked token {token.prefix}" in out
    token.refresh_from_db()
    assert token.revoked_at is not None and token.state == "revoked"
    assert ApiClient(secret).get("/api/v1/sessions").status_code == 401
    revoked = AuditEntry.objects.get(action=AuditEntry.TOKEN_REVOKED)
    assert (revoked.project, revoked.actor, revoked.actor_name, revoked.target) == (Project.default(), None, "cli", token.prefix)
    assert revoked.detail == {"user": "alice", "name": "ci"}


def test_revoke_by_id_and_by_the_secret_itself(alice):
    by_id, by_secret = token_for(alice), token_for(alice)
    run("revoke", str(row(by_id).pk))
    run("revoke", by_secret)
    assert row(by_id).revoked_at is not None and row(by_secret).revoked_at is not None
    assert AuditEntry.objects.filter(action=AuditEntry.TOKEN_REVOKED).count() == 2


def test_revoking_twice_says_so_and_audits_once(alice):
    token = row(token_for(alice))
    run("revoke", token.prefix)
    out, _ = run("revoke", token.prefix)
    assert f"Token {token.prefix}" in out and "was already revoked" in out
    assert AuditEntry.objects.filter(action=AuditEntry.TOKEN_REVOKED).count() == 1


def test_an_ambiguous_prefix_lists_the_matches_and_revokes_nothing(alice):
    first, second = row(token_for(alice, name="one")), row(token_for(alice, name="two"))
    message = refused("revoke", "tl_")
    assert "matches more than one token" in message
    assert first.prefix in message and second.prefix in message and f"id {first.pk}" in message
    assert not ApiToken.objects.filter(revoked_at__isnull=False).exists()
    assert not AuditEntry.objects.filter(action=AuditEntry.TOKEN_REVOKED).exists()


def test_revoking_an_unknown_token_says_so(alice):
    token_for(alice)
    assert "no token with the id or prefix 'tl_nothere'" in refused("revoke", "tl_nothere")
    assert "no token with the id or prefix '999999'" in refused("revoke", "999999")
    assert "no token" in refused("revoke", "tl_" + "x" * 40)
    assert not ApiToken.objects.filter(revoked_at__isnull=False).exists()


@pytest.mark.django_db(transaction=True)
def test_revoking_closes_the_tokens_stream_on_a_real_server_within_seconds(alice, tmp_path):
    """Across processes: the command writes the database, a Daphne at the default check interval closes the stream."""
    services.create_session(session_id="streamed")
    secret = token_for(alice)
    server = DaphneServer(connection.settings_dict, tmp_path / "daphne.log").start()
    try:
        url = f"ws://127.0.0.1:{server.port}/ws/v1/sessions/streamed/events"
        with connect(url, additional_headers={"Authorization": f"Bearer {secret}"}, open_timeout=5) as ws:
            with pytest.raises(TimeoutError):
                ws.recv(timeout=1)  # open, and nothing to send
            run("revoke", row(secret).prefix)
            revoked_at = time.monotonic()
            with pytest.raises(ConnectionClosed) as closed:
                ws.recv(timeout=5)
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 4401
            assert time.monotonic() - revoked_at < 3.5
    finally:
        server.stop()
    assert "Traceback" not in (tmp_path / "daphne.log").read_text()


@pytest.mark.parametrize("given", ["9" * 4301, "²", "9" * 40])
def test_revoke_by_an_id_that_cannot_be_one_is_refused_in_words(alice, given):
    token_for(alice)
    assert "token" in refused("revoke", given)
    assert not ApiToken.objects.filter(revoked_at__isnull=False).exists()
