"""The permission matrix: every URL pattern (pages, API operations, admin
views) and every websocket route, for every kind of actor, reads and writes.

The URL configuration is walked, not listed by hand: a route added without
an entry here fails `test_every_route_is_in_the_matrix`. Admin URLs are
covered by one rule per registered ModelAdmin (`ADMIN_MODELS`), so a new
registration or a custom admin URL without a rule fails it too.

Actors (see tests/permission_world.py): anonymous; an outsider, admin of
another project; a viewer, a member, an operator and an admin (not a
superuser) of project "alpha", whose sessions are probed. The operator and
the admin are staff, as `create_token --staff` makes operators; so is the
outsider, so the admin site's project boundary is probed too. API routes
are tried with each actor's login session and with a token of its role.

An expectation reads "STATUS [LOCATION] [stored] [+P|-P|+TEXT]": the status;
for a redirect, the start of its Location; `stored` means the write really
happened (rows added or removed, a role or a token changed), and without it
a write attempt must change nothing at all; +P: the answer shows alpha's
sessions; -P: nothing of alpha at all, but the outsider's own project;
+TEXT: the answer holds TEXT. Every attempt runs in a savepoint rolled back
after it, so each actor meets the same world.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.contrib import admin
from django.db import transaction
from django.urls import URLPattern, URLResolver

from dashboard import urls as dashboard_urls
from dashboard.asgi import application
from dashboard.live import calls as live_calls
from dashboard.routing import websocket_urlpatterns
from sessions_app import services
from sessions_app.log.events import validate_batch
from sessions_app.log.ledger import STATES
from tests.dashboard.conftest import QUIET, WAIT, fresh_layer, opened, slow_poll  # noqa: F401  (fixtures of the socket tests)
from tests.conftest import load_factor
from tests.permission_world import ACTORS, OUTSIDER_SESSION, STAFF, build_world
from tests.sessions_app import factories as f

pytestmark = pytest.mark.django_db

LOGIN = "302 /login/"
ADMIN_LOGIN = "302 /admin/login/"


def by_role(anonymous: str, outsider: str, viewer: str, member: str | None = None, operator: str | None = None, admin: str | None = None) -> dict[str, str]:
    """Each role holds the rights of the one before it, so an unnamed role answers as the one before."""
    member = viewer if member is None else member
    operator = member if operator is None else operator
    admin = operator if admin is None else admin
    return {"anonymous": anonymous, "outsider": outsider, "viewer": viewer, "member": member, "operator": operator, "admin": admin}


def everyone(outcome: str) -> dict[str, str]:
    return by_role(outcome, outcome, outcome)


@dataclass(frozen=True)
class Probe:
    """One request. `path` and string values of `data` are formatted with the world's values ({closed}, {open_digest}...)."""

    method: str
    path: str
    expect: dict[str, str]
    data: dict | None = None
    api: bool = False  # JSON bodies, and tried with each actor's bearer token too
    credentials: tuple[str, ...] = ()  # only these ("login", "token"); anonymous always tries without any


def credentials_of(probe: Probe, actor: str) -> tuple[str, ...]:
    if actor == "anonymous":
        return ("login",)
    return probe.credentials or (("login", "token") if probe.api else ("login",))


def page_read(path: str) -> Probe:
    return Probe("GET", path, by_role(LOGIN, "404", "200"))


def page_admin(method: str, path: str, allowed: str, data: dict | None = None) -> Probe:
    """A project settings page of alpha's: its admins only."""
    return Probe(method, path, by_role(LOGIN, "404", "403", admin=allowed), data=data)


def api_read(path: str) -> Probe:
    return Probe("GET", path, by_role("401", "404", "200"), api=True)


def api_write(path: str, data: dict, *, needs: str) -> Probe:
    """A write of alpha's that `needs` the member or the operator role: refused (403) below it."""
    allowed = "200 stored" if needs == "operator" else "201 stored"
    member = allowed if needs == "member" else "403"
    return Probe("POST", path, by_role("401", "404", "403", member, allowed), data=data, api=True)


def note_change(allowed: str) -> dict[str, str]:
    """A change to a member's note: its author (the member) and the project's admins only; the operator is neither."""
    return by_role("401", "404", "403", allowed, "403", allowed)


def page_note_change(allowed: str) -> dict[str, str]:
    """note_change for the session page's note forms (a login's page: anonymous is sent to log in)."""
    return by_role(LOGIN, "404", "403", allowed, "403", allowed)


CLOSED, OPEN = "/sessions/{closed}", "/sessions/{open}"
# An OTLP/JSON export: one model span of a conversation naming alpha's closed session.
OTLP_CHAT = {"resourceSpans": [{"scopeSpans": [{"spans": [{
    "traceId": "5b8efff798038103d269b633813fc60c", "spanId": "00f067aa0ba902b7", "name": "chat m",
    "attributes": [{"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}}, {"key": "gen_ai.conversation.id", "value": {"stringValue": "{closed}"}}],
}]}]}]}  # fmt: skip
API = "/api/v1/sessions"

# URL name (or route, for unnamed patterns) -> the requests that probe it.
HTTP_MATRIX: dict[str, list[Probe]] = {
    # Pages -------------------------------------------------------------
    "session_list": [Probe("GET", "/", by_role(LOGIN, "200 -P", "200 +P"))],
    "session_detail": [page_read(CLOSED + "/"), page_read(OPEN + "/?view=raw")],
    "session_blocks": [page_read(CLOSED + "/blocks")],
    # Seq 1 opens the closed session's turn: its first page, asked by turn and page, and by the seq of its turn_end.
    "session_turn_page": [page_read(CLOSED + "/pages?turn=1&page=0"), page_read(CLOSED + "/pages?seq=4")],
    "session_ledger_rows": [page_read(CLOSED + "/ledger?rows=ledger-0000000000000000")],
    "event_json": [page_read(CLOSED + "/events/0.json")],
    "session_lineage": [page_read(CLOSED + "/lineage")],
    "session_timeline": [page_read(CLOSED + "/timeline")],
    # Two sessions compared: both must be readable (the other one's refusal reads as its absence).
    "session_compare": [page_read(CLOSED + "/compare?with={open}")],
    # Agents: every world session's agent is "matrix", in alpha and in beta; each reader sees only their projects' failures.
    "agent_list": [Probe("GET", "/agents/", by_role(LOGIN, "200 -P", "200 +P"))],
    "fleet_calls": [Probe("GET", "/calls/?" + "&".join(f"state={s}" for s in STATES), by_role(LOGIN, "200 -P", "200 +P"))],
    "agent_detail": [
        Probe("GET", "/agents/agent?name=matrix", by_role(LOGIN, "200 -P", "200 +P")),
        Probe("GET", "/agents/agent?name=nobody", by_role(LOGIN, "404", "404")),
    ],
    "fork_session": [
        Probe("GET", CLOSED + "/fork?boundary=last", by_role(LOGIN, "404", "403", "200")),
        Probe(
            "POST", CLOSED + "/fork", by_role(LOGIN, "404", "403", "302 /sessions/alpha-fork/ stored"),
            data={"boundary": "last", "id": "alpha-fork"},
        ),
    ],
    # Notes from the session page (dashboard.pages.notes): members add; the author or an admin edits and deletes.
    "add_note": [
        Probe("GET", CLOSED + "/notes?seq=1&text=draft", by_role(LOGIN, "404", "403", "200")),
        Probe(
            "POST", CLOSED + "/notes", by_role(LOGIN, "404", "403", "302 /sessions/alpha-closed/#seq-1 stored"),
            data={"text": "matrix", "tags": "verified", "seq": "1"},
        ),
    ],
    "edit_note": [
        Probe("GET", "/notes/{member_note}/edit", page_note_change("200")),
        Probe("POST", "/notes/{member_note}/edit", page_note_change("302 /sessions/alpha-closed/ stored"), data={"text": "edited", "tags": ""}),
        Probe("POST", "/notes/{admin_note}/edit", {**page_note_change("302 /sessions/alpha-closed/ stored"), "member": "403"}, data={"text": "edited"}),
    ],
    "delete_note": [
        Probe("GET", "/notes/{member_note}/delete", page_note_change("200")),
        Probe("POST", "/notes/{member_note}/delete", page_note_change("302 /sessions/alpha-closed/ stored")),
        Probe("POST", "/notes/{admin_note}/delete", {**page_note_change("302 /sessions/alpha-closed/ stored"), "member": "403"}),
    ],
    # Verdicts from a call's card (dashboard.pages.verdicts): operators and admins (the recover permission).
    "call_verdict": [
        Probe(
            "POST", CLOSED + "/verdict", by_role(LOGIN, "404", "403", "403", "200 stored +verified happened"),
            data={"call_id": "c9", "action": "record", "outcome": "happened", "evidence": "seen in the portal"},
        ),
        Probe("POST", CLOSED + "/verdict", by_role(LOGIN, "404", "403", "403", "422 +has no current verdict"), data={"call_id": "c9", "action": "withdraw"}),
    ],
    # "Check now" on a call's card (dashboard.pages.checks): the recover permission; this call's tool has no reconciler.
    "check_call": [Probe("POST", CLOSED + "/calls/c9/check", by_role(LOGIN, "404", "403", "403", "409"))],
    "recovery_preview": [
        page_read(OPEN + "/recovery"),
        Probe(
            "POST", OPEN + "/recovery", by_role(LOGIN, "404", "403", "403", "302 /sessions/alpha-open/?highlight= stored"),
            data={"action": "recover", "digest": "{open_digest}"},
        ),
        Probe(
            "POST", CLOSED + "/recovery", by_role(LOGIN, "404", "403", "403", "302 /sessions/alpha-closed/?highlight= stored"),
            data={"action": "patch", "digest": "{dangling_digest}"},
        ),
    ],
    # Project settings: the project's admins only; members below admin get a 403 page naming the admins.
    "project_list": [Probe("GET", "/projects/", by_role(LOGIN, "200 -P", "200 +project-alpha"))],
    "project_members": [
        page_admin("GET", "/projects/alpha/", "200"),
        page_admin("POST", "/projects/alpha/", "302 /projects/alpha/ stored", {"username": "{newcomer}", "role": "viewer"}),
    ],
    "project_member": [
        page_admin("GET", "/projects/alpha/members/{viewer_pk}", "405"),
        page_admin("POST", "/projects/alpha/members/{viewer_pk}", "302 /projects/alpha/ stored", {"action": "change", "role": "member"}),
    ],
    "project_tokens": [
        page_admin("GET", "/projects/alpha/tokens", "200"),
        page_admin("POST", "/projects/alpha/tokens", "200 stored", {"owner": "{admin_pk}", "scopes": ["read"], "name": "matrix"}),
    ],
    "revoke_token": [
        page_admin("GET", "/projects/alpha/tokens/{viewer_token_pk}/revoke", "200"),
        page_admin("POST", "/projects/alpha/tokens/{viewer_token_pk}/revoke", "302 /projects/alpha/tokens stored"),
    ],
    "project_audit": [page_admin("GET", "/projects/alpha/audit", "200")],
    "project_retention": [
        page_admin("GET", "/projects/alpha/retention", "200"),
        page_admin("POST", "/projects/alpha/retention", "302 /projects/alpha/retention stored", {"retention_days": "30"}),
    ],
    # Webhooks (sessions_app.services.notify): the project's admins only.
    "project_webhooks": [
        page_admin("GET", "/projects/alpha/webhooks", "200"),
        page_admin(
            "POST", "/projects/alpha/webhooks", "302 /projects/alpha/webhooks/ stored",
            {"url": "https://93.184.215.14/new", "agent_patterns": "*", "kinds": ["stalled"], "enabled": "on"},
        ),
    ],
    "project_webhook": [
        page_admin("GET", "/projects/alpha/webhooks/{webhook_pk}", "200 +Delivery history"),
        page_admin(
            "POST", "/projects/alpha/webhooks/{webhook_pk}", "302 /projects/alpha/webhooks/ stored",
            {"action": "save", "url": "https://93.184.215.14/changed", "agent_patterns": "bot-*", "kinds": ["held"]},
        ),
        page_admin("POST", "/projects/alpha/webhooks/{webhook_pk}", "302 /projects/alpha/webhooks/ stored", {"action": "rotate"}),
        page_admin("POST", "/projects/alpha/webhooks/{webhook_pk}", "302 /projects/alpha/webhooks stored", {"action": "delete"}),
    ],
    # The project's settings form on its page (sessions_app.services.project_settings): its admins only.
    "project_settings": [
        page_admin("GET", "/projects/alpha/settings", "405"),
        page_admin("POST", "/projects/alpha/settings", "302 /projects/alpha/ stored", {"auto_recover_settled": "on"}),
    ],
    # Tools (sessions_app.services.tool_policies): every member reads the page; only admins change the project's policies.
    "project_tools": [
        page_read("/projects/alpha/tools/"),
        Probe(
            "POST", "/projects/alpha/tools/", by_role(LOGIN, "404", "403", admin="302 /projects/alpha/tools/ stored"),
            data={"action": "save", "pattern": "matrix_new", "side_effect": "read_only"},
        ),
        Probe("POST", "/projects/alpha/tools/", by_role(LOGIN, "404", "403", admin="302 /projects/alpha/tools/ stored"), data={"action": "delete", "pattern": "alpha_*"}),
    ],
    # Prices (sessions_app.services.prices): every member reads the page; only admins set or remove the project's own.
    "project_prices": [
        page_read("/projects/alpha/prices"),
        Probe(
            "POST", "/projects/alpha/prices", by_role(LOGIN, "404", "403", admin="302 /projects/alpha/prices stored"),
            data={"model": "matrix-model", "valid_from_date": "2026-11-02", "valid_from_hour": "10", "input": "1", "output": "2"},
        ),
    ],
    # Deleting a whole session (sessions_app.services.retention): the project's admins only.
    "delete_session": [
        Probe("GET", CLOSED + "/delete", by_role(LOGIN, "404", "403", admin="200")),
        Probe("POST", CLOSED + "/delete", by_role(LOGIN, "404", "403", admin="302 /?project=alpha stored")),
    ],
    "invite_member": [
        page_admin("GET", "/projects/alpha/invite", "302 /projects/alpha/"),
        page_admin("POST", "/projects/alpha/invite", "200 stored +set-password", {"username": "matrix-invitee", "role": "viewer"}),
    ],
    # A person's own account: every logged-in actor has one; a token is revoked there by its owner only.
    "account": [Probe("GET", "/account/", by_role(LOGIN, "200", "200"))],
    "revoke_own_token": [
        Probe("GET", "/account/tokens/{viewer_token_pk}/revoke", {**everyone("404"), "anonymous": LOGIN, "viewer": "200"}),
        Probe("POST", "/account/tokens/{viewer_token_pk}/revoke", {**everyone("404"), "anonymous": LOGIN, "viewer": "302 /account/ stored"}),
    ],
    "password_change": [
        Probe("GET", "/account/password/", by_role(LOGIN, "200", "200")),
        Probe("POST", "/account/password/", by_role(LOGIN, "200", "200"), data={"old_password": "wrong"}),
    ],
    # An invitation's link, here a made-up one: the page saying it no longer works, for anyone.
    "set_password": [Probe("GET", "/account/set-password/MQ/abc-123/", everyone("410"))],
    "favicon.ico": [Probe("GET", "/favicon.ico", everyone("302 /static/turnlog/favicon.svg"))],
    "login": [Probe("GET", "/login/", everyone("200"))],
    "logout": [Probe("GET", "/logout/", everyone("405")), Probe("POST", "/logout/", everyone(LOGIN))],
    # API ---------------------------------------------------------------
    "api-v1:openapi-json": [Probe("GET", "/api/v1/openapi.json", everyone("200"), api=True)],
    "api-v1:openapi-view": [Probe("GET", "/api/v1/docs", everyone("200"), api=True)],
    "api-v1:api-root": [Probe("GET", "/api/v1/", everyone("404"), api=True)],
    "api-v1:list_sessions": [Probe("GET", API, by_role("401", "200 -P", "200 +P"), api=True)],
    "api-v1:create_session": [api_write(API, {"project": "alpha", "id": "alpha-new"}, needs="member")],
    "api-v1:import_session": [api_write(API + "/import?project=alpha", "{blob}", needs="member")],
    "api-v1:get_session": [api_read(API + "/{closed}")],
    "api-v1:list_events": [api_read(API + "/{closed}/events")],
    "api-v1:append_events": [
        api_write(API + "/{closed}/events", {"events": [{"type": "user_message", "data": {"content": "more"}}]}, needs="member")
    ],
    "api-v1:list_messages": [api_read(API + "/{closed}/messages")],
    "api-v1:export_session": [api_read(API + "/{closed}/export")],
    "api-v1:get_recovery_plan": [api_read(API + "/{open}/recovery-plan")],
    "api-v1:get_dangling_calls": [api_read(API + "/{closed}/dangling-calls")],
    "api-v1:recover_session": [api_write(API + "/{open}/recover", {"digest": "{open_digest}"}, needs="operator")],
    "api-v1:patch_dangling_calls": [
        api_write(API + "/{closed}/patch-dangling-calls", {"digest": "{dangling_digest}"}, needs="operator")
    ],
    "api-v1:fork_session": [api_write(API + "/{closed}/fork", {"boundary": "last", "id": "alpha-fork"}, needs="member")],
    # Notes: viewers read them, members add them and change their own, admins change any (an operator is not the author).
    # Calls: read as events are (viewers and `read` tokens).
    "api-v1:list_calls": [api_read(API + "/{open}/calls?all=true")],
    # The fleet's calls: each reader sees the calls of their own projects only (every state asked for).
    "api-v1:list_fleet_calls": [Probe("GET", "/api/v1/calls?" + "&".join(f"state={s}" for s in STATES), by_role("401", "200 -P", "200 +P"), api=True)],
    "api-v1:list_notes": [api_read(API + "/{closed}/notes")],
    "api-v1:add_note": [api_write(API + "/{closed}/notes", {"text": "matrix", "tags": ["verified"], "seq": 1}, needs="member")],
    "api-v1:edit_note": [
        Probe("PATCH", "/api/v1/notes/{member_note}", note_change("200 stored"), data={"text": "edited"}, api=True),
        Probe("PATCH", "/api/v1/notes/{admin_note}", {**note_change("200 stored"), "member": "403"}, data={"tags": ["x"]}, api=True),
    ],
    # Verdicts: read as the session is; recorded, withdrawn and re-checked by those who may recover (the `recover` scope).
    "api-v1:record_verdict": [
        Probe("PUT", API + "/{open}/calls/c3/verdict", by_role("401", "404", "403", "403", "200 stored"), data={"outcome": "happened", "evidence": "matrix"}, api=True)
    ],
    "api-v1:withdraw_verdict": [Probe("DELETE", API + "/{closed}/calls/c1/verdict", by_role("401", "404", "403", "403", "200 stored"), api=True)],
    "api-v1:list_verdicts": [api_read(API + "/{closed}/calls/c1/verdicts")],
    # (c9's tool has no reconciler in this world: past the permission, 409 no_reconciler, as the card's Check now.)
    "api-v1:queue_check": [Probe("POST", API + "/{closed}/calls/c9/check", by_role("401", "404", "403", "403", "409"), api=True)],
    # Search: over the projects the caller reads (viewers and `read` tokens); another project's hits never show.
    "api-v1:search_log": [Probe("GET", "/api/v1/search?q=tool_c1", by_role("401", "200 -P", "200 +P"), api=True)],
    "api-v1:delete_note": [
        Probe("DELETE", "/api/v1/notes/{member_note}", note_change("204 stored"), api=True),
        Probe("DELETE", "/api/v1/notes/{admin_note}", {**note_change("204 stored"), "member": "403"}, api=True),
    ],
    # A project's tools: read as its sessions are; its policies changed by its admins' logins only (no token scope lends that).
    "api-v1:project_tools": [api_read("/api/v1/projects/alpha/tools")],
    # A project's prices: read as its sessions are; set and removed by its admins' logins only (as policies).
    "api-v1:project_prices": [api_read("/api/v1/projects/alpha/prices")],
    "api-v1:set_price": [
        Probe("PUT", "/api/v1/projects/alpha/prices", by_role("401", "404", "403", admin="200 stored"), api=True, credentials=("login",),
              data={"model": "matrix-model", "valid_from": "2026-11-02T10:00:00Z", "input": "1", "output": "2"}),
        Probe("PUT", "/api/v1/projects/alpha/prices", by_role("401", "404", "403"), api=True, credentials=("token",),
              data={"model": "matrix-model", "valid_from": "2026-11-02T10:00:00Z", "input": "1", "output": "2"}),
    ],  # fmt: skip
    "api-v1:remove_price": [
        Probe("DELETE", "/api/v1/projects/alpha/prices", by_role("401", "404", "403", admin="404"), api=True, credentials=("login",),
              data={"model": "no-such-price", "valid_from": "2026-11-02T10:00:00Z"}),
        Probe("DELETE", "/api/v1/projects/alpha/prices", by_role("401", "404", "403"), api=True, credentials=("token",),
              data={"model": "no-such-price", "valid_from": "2026-11-02T10:00:00Z"}),
    ],  # fmt: skip
    "api-v1:save_policy": [
        Probe("PUT", "/api/v1/projects/alpha/tools/policies/matrix%2Fnew", by_role("401", "404", "403", admin="200 stored"),
              data={"side_effect": "read_only"}, api=True, credentials=("login",)),
        Probe("PUT", "/api/v1/projects/alpha/tools/policies/matrix%2Fnew", by_role("401", "404", "403"),
              data={"side_effect": "read_only"}, api=True, credentials=("token",)),
    ],  # fmt: skip
    "api-v1:delete_policy": [
        Probe("DELETE", "/api/v1/projects/alpha/tools/policies/alpha_*", by_role("401", "404", "403", admin="204 stored"), api=True, credentials=("login",)),
        Probe("DELETE", "/api/v1/projects/alpha/tools/policies/alpha_*", by_role("401", "404", "403"), api=True, credentials=("token",)),
    ],
    # Whatever no endpoint serves under /api/: a JSON 404 for anyone, credentials or not.
    "^api/": [Probe("GET", "/api/v1/nothing", everyone("404"), api=True), Probe("POST", "/api/v2/sessions", everyone("404"), api=True)],
    # OTLP: bearer tokens only (a login is no credential there); the token's project receives the spans, so the
    # outsider's chat naming alpha's session is refused span by span (a partial success) and stores nothing.
    "otlp_traces": [
        Probe("POST", "/otlp/v1/traces", everyone("401"), data=OTLP_CHAT, api=True, credentials=("login",)),
        Probe("POST", "/otlp/v1/traces", by_role("401", "200 +belongs", "403", "200 stored"), data=OTLP_CHAT, api=True, credentials=("token",)),
        Probe("GET", "/otlp/v1/traces", everyone("405"), api=True),
    ],
    "^otlp/": [Probe("POST", "/otlp/v1/metrics", everyone("404"), data=OTLP_CHAT, api=True)],
    # Prometheus scrapes: a superuser's site-level token only (tests/sessions_app/metrics); a login is no credential,
    # and a project's token, whatever its role, is refused.
    "metrics": [
        Probe("GET", "/metrics", everyone("401"), api=True, credentials=("login",)),
        Probe("GET", "/metrics", by_role("401", "403", "403"), api=True, credentials=("token",)),
    ],
}


def staff_only(staff: str, others: str = ADMIN_LOGIN) -> dict[str, str]:
    """Admin pages: only staff get past the admin's login (outsider, operator, admin)."""
    return {actor: staff if actor in STAFF else others for actor in ACTORS}


ADMIN_SITE_MATRIX: dict[str, list[Probe]] = {
    "admin:index": [Probe("GET", "/admin/", staff_only("200"))],
    "admin:login": [Probe("GET", "/admin/login/", staff_only("302 /admin/", others="200"))],
    # Logged-out or non-staff visitors are sent to the index (then the login); staff must POST.
    "admin:logout": [Probe("GET", "/admin/logout/", staff_only("405", others="302 /admin/")), Probe("POST", "/admin/logout/", staff_only(LOGIN, others="302 /admin/"))],
    "admin:password_change": [Probe("GET", "/admin/password_change/", staff_only("200"))],
    "admin:password_change_done": [Probe("GET", "/admin/password_change/done/", staff_only("200"))],
    "admin:autocomplete": [
        Probe("GET", "/admin/autocomplete/?app_label=sessions_app&model_name=session&field_name=parent", {**staff_only("200 +P"), "outsider": "200 -P"})
    ],
    "admin:jsi18n": [Probe("GET", "/admin/jsi18n/", staff_only("200"))],
    "admin:view_on_site": [Probe("GET", "/admin/r/{session_type}/{closed}/", staff_only("404"))],
    "admin:app_list": [Probe("GET", "/admin/sessions_app/", staff_only("200")), Probe("GET", "/admin/auth/", staff_only("404"))],
    "admin/(?P<url>.*)$": [Probe("GET", "/admin/nothing/", staff_only("404"))],
}


@dataclass(frozen=True)
class AdminModel:
    """What the admin of one model answers staff: kind -> outcome (insiders), and the outsider's where it differs.

    Kinds: the generated views (changelist, add, change, history, delete)
    and the writes `add POST`, `change POST`, `delete POST`; the bare object
    URL redirects staff to its change page. `pk` names the world value of
    an object of that model; `extra`: more probes, of its custom URLs or of
    generated ones (its actions).
    """

    pk: str
    staff: dict[str, str]
    outsider: dict[str, str] = field(default_factory=dict)
    extra: dict[str, list[Probe]] = field(default_factory=dict)


NO_PERMISSION = {
    "changelist": "403", "add": "403", "change": "403", "history": "403", "delete": "403",
    "add POST": "403", "change POST": "403", "delete POST": "403",
}
# Logs of a project: staff read them (read-only), only for projects where they may read.
PROJECT_LOG = {
    "changelist": "200 +P", "add": "403", "change": "200", "history": "200", "delete": "403",
    "add POST": "403", "change POST": "403", "delete POST": "403",
}
OUTSIDE_PROJECT_LOG = {"changelist": "200 -P", "change": "302 /admin/", "history": "302 /admin/"}
# Site-wide, for every staff user to read; editing needs the model permissions (none here).
SITE_SETTING = {
    "changelist": "200", "add": "403", "change": "200", "history": "200", "delete": "403",
    "add POST": "403", "change POST": "403", "delete POST": "403",
}

ADMIN_MODELS: dict[str, AdminModel] = {
    "auth.group": AdminModel("group", NO_PERMISSION),
    "auth.user": AdminModel(
        "viewer_pk", NO_PERMISSION,
        extra={"admin:auth_user_password_change": [Probe("GET", "/admin/auth/user/{viewer_pk}/password/", staff_only("403"))]},
    ),
    "axes.accessattempt": AdminModel("access_attempt", NO_PERMISSION),
    "axes.accesslog": AdminModel("access_log", NO_PERMISSION),
    "axes.accessfailurelog": AdminModel("access_failure", NO_PERMISSION),
    "sessions_app.session": AdminModel(
        "closed", PROJECT_LOG, OUTSIDE_PROJECT_LOG,
        # The recovery preview action: another project's session cannot even be selected.
        extra={"admin:sessions_app_session_changelist": [Probe(
            "POST", "/admin/sessions_app/session/",
            {**staff_only("302 /sessions/alpha-open/recovery"), "outsider": "302 /admin/sessions_app/session/"},
            data={"action": "preview_recovery", "_selected_action": "alpha-open"},
        )]},
    ),
    "sessions_app.event": AdminModel("closed_event", PROJECT_LOG, OUTSIDE_PROJECT_LOG),
    "sessions_app.recoveryrecord": AdminModel("alpha_record", PROJECT_LOG, OUTSIDE_PROJECT_LOG),
    "sessions_app.toolpolicy": AdminModel("policy", SITE_SETTING),
    "sessions_app.autorecoverypolicy": AdminModel("auto_policy", SITE_SETTING),
    # Projects, their tokens and the audit log: superusers only (a project's admins use its project pages).
    "sessions_app.project": AdminModel("alpha_pk", NO_PERMISSION),
    "sessions_app.apitoken": AdminModel("viewer_token_pk", NO_PERMISSION),
    "sessions_app.auditentry": AdminModel("audit_entry", NO_PERMISSION),
    # Every project's webhooks: superusers only (a project's admins use its Webhooks tab).
    "sessions_app.webhookendpoint": AdminModel("webhook_pk", NO_PERMISSION),
}


def admin_model_probes(label: str, rule: AdminModel) -> dict[str, list[Probe]]:
    app, model = label.split(".")
    base = f"/admin/{app}/{model}/"
    obj = base + "{%s}/" % rule.pk

    def expect(kind: str) -> dict[str, str]:
        outsider = rule.outsider.get(kind, rule.staff[kind])
        return {**staff_only(rule.staff[kind]), "outsider": outsider}

    probes = {
        f"admin:{app}_{model}_changelist": [Probe("GET", base, expect("changelist"))],
        f"admin:{app}_{model}_add": [Probe("GET", base + "add/", expect("add")), Probe("POST", base + "add/", expect("add POST"), data={})],
        f"admin:{app}_{model}_change": [
            Probe("GET", obj + "change/", expect("change")),
            Probe("POST", obj + "change/", expect("change POST"), data={}),
        ],
        f"admin:{app}_{model}_history": [Probe("GET", obj + "history/", expect("history"))],
        f"admin:{app}_{model}_delete": [
            Probe("GET", obj + "delete/", expect("delete")),
            Probe("POST", obj + "delete/", expect("delete POST"), data={"post": "yes"}),
        ],
        f"admin/{app}/{model}/<path:object_id>/": [Probe("GET", obj, staff_only("302 " + obj + "change/"))],
    }
    for key, extra in rule.extra.items():
        probes[key] = probes.get(key, []) + extra
    return probes


def admin_matrix() -> dict[str, list[Probe]]:
    matrix = dict(ADMIN_SITE_MATRIX)
    for label, rule in ADMIN_MODELS.items():
        matrix.update(admin_model_probes(label, rule))
    return matrix


MATRIX = {**HTTP_MATRIX, **admin_matrix()}


def http_route_keys(patterns, prefix: str = "", namespace: str = "") -> set[str]:
    """Every URL pattern: its namespaced name, or its full route when it has none."""
    keys = set()
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            inner = ":".join(filter(None, [namespace, pattern.namespace]))
            keys |= http_route_keys(pattern.url_patterns, prefix + str(pattern.pattern), inner)
        elif isinstance(pattern, URLPattern):
            keys.add(":".join(filter(None, [namespace, pattern.name])) if pattern.name else prefix + str(pattern.pattern))
    return keys


def test_every_route_is_in_the_matrix():
    routes = http_route_keys(dashboard_urls.urlpatterns)
    missing, extra = sorted(routes - MATRIX.keys()), sorted(MATRIX.keys() - routes)
    assert not missing and not extra, f"URL patterns without a matrix entry: {missing}; matrix entries without a URL pattern: {extra}"
    registered = {model._meta.label_lower for model in admin.site._registry}
    assert registered == ADMIN_MODELS.keys(), f"admin registrations {sorted(registered ^ ADMIN_MODELS.keys())} need a rule in ADMIN_MODELS"


def test_every_websocket_route_is_in_the_matrix():
    routes = {str(pattern.pattern) for pattern in websocket_urlpatterns}
    missing, extra = sorted(routes - SOCKET_MATRIX.keys()), sorted(SOCKET_MATRIX.keys() - routes)
    assert not missing and not extra, f"websocket routes without a matrix entry: {missing}; matrix entries without a route: {extra}"


def test_every_actor_is_expected_everywhere():
    for key, probes in MATRIX.items():
        for probe in probes:
            assert set(probe.expect) == set(ACTORS), f"{key} {probe.method} {probe.path}: expectations for {sorted(probe.expect)}"


@pytest.fixture(scope="class")
def world(django_db_setup, django_db_blocker):
    """One world for every HTTP route, built once in a transaction rolled back after their class
    (each test, and each attempt in it, rolls its own changes back too). The socket tests,
    which need committed rows, run outside that transaction."""
    with django_db_blocker.unblock(), transaction.atomic():
        yield build_world()
        transaction.set_rollback(True)


class TestHttpRoutes:
    @pytest.mark.parametrize("key", sorted(MATRIX))
    def test_route(self, key, world):
        mismatches = [
            mismatch
            for probe in MATRIX[key]
            for actor in ACTORS
            for credential in credentials_of(probe, actor)
            if (mismatch := world.check(probe, actor, credential))
        ]
        assert not mismatches, f"{key}:\n" + "\n".join(mismatches)


# Websockets ----------------------------------------------------------------


@dataclass(frozen=True)
class SocketProbe:
    """A socket opened by every actor with its login cookie (from an allowed Origin) and,
    where `token` is given, with its bearer token.

    Outcomes: a close code, or "open +P" (alpha's events or rows arrive, a
    live append included) / "open -P" (none of alpha's, but the outsider's own).
    """

    path: str
    login: dict[str, str]
    token: dict[str, str] | None = None
    # How long "nothing more arrives" is watched for after the live append: a socket that lists again
    # at most once per settle time may hold a frame that long.
    quiet: float = QUIET


SOCKET_MATRIX: dict[str, SocketProbe] = {
    "ws/v1/sessions/<session_id:session_id>/events": SocketProbe(
        "/ws/v1/sessions/alpha-closed/events",
        login=by_role("4401", "4404", "open +P"),
        token=by_role("4401", "4404", "open +P"),
    ),
    # The browsers' sockets take the login cookie only.
    "ws/sessions/<session_id:session_id>/live": SocketProbe(
        "/ws/sessions/alpha-closed/live?after=0", login=by_role("4401", "4404", "open +P"), token=everyone("4401")
    ),
    "ws/sessions/<session_id:session_id>/recovery/live": SocketProbe(
        f"/ws/sessions/alpha-closed/recovery/live?next_seq=0&digest={'0' * 64}",
        login=by_role("4401", "4404", "open +P"),
        token=everyone("4401"),
    ),
    "ws/sessions/live": SocketProbe("/ws/sessions/live", login=by_role("4401", "open -P", "open +P"), token=everyone("4401")),
    # The fleet's calls: the live append sights a call outside every turn, pending while its session is active.
    "ws/calls/live": SocketProbe(
        "/ws/calls/live?state=pending", login=by_role("4401", "open -P", "open +P"), token=everyone("4401"),
        quiet=live_calls.CHANGE_SETTLE_SECONDS + 1.0,
    ),
    # Any other path under /ws/: an unknown session, whoever asks.
    "^ws/": SocketProbe("/ws/nothing", login=everyone("4404"), token=everyone("4404")),
}
ORIGIN = "http://127.0.0.1"


@pytest.fixture
def socket_world():
    return build_world()


async def read_until_quiet(communicator: WebsocketCommunicator, received: list[str], quiet: float = QUIET) -> str | None:
    """Collect the socket's frames until it goes quiet; its close code if it closed (then it is disconnected, as a client would)."""
    # receive_nothing, not a receive_output timeout: that would cancel the application.
    while not await communicator.receive_nothing(quiet):
        message = await communicator.receive_output(timeout=WAIT)
        if message["type"] == "websocket.close":
            await communicator.disconnect(code=message.get("code"), timeout=WAIT)
            return str(message.get("code"))
        received.append(message.get("text") or "")
    return None


@database_sync_to_async
def append_live_events() -> None:
    for session_id in ("alpha-closed", OUTSIDER_SESSION):
        services.append_events(session_id=session_id, events=validate_batch([f.user(f"{session_id}-live"), f.assistant(calls=[f"{session_id}-live-call"])]))


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
@pytest.mark.usefixtures("slow_poll", "fresh_layer")
@pytest.mark.parametrize("route", sorted(SOCKET_MATRIX))
async def test_socket(route, socket_world):
    world = socket_world
    probe = SOCKET_MATRIX[route]
    attempts = [(actor, "login", probe.login[actor]) for actor in ACTORS]
    if probe.token is not None:
        attempts += [(actor, "token", probe.token[actor]) for actor in ACTORS if actor != "anonymous"]
    sockets = []
    for actor, credential, expected in attempts:
        headers = [(b"host", b"127.0.0.1"), (b"origin", ORIGIN.encode())]
        if credential == "login" and actor in world.cookies:
            headers.append((b"cookie", f"{settings.SESSION_COOKIE_NAME}={world.cookies[actor]}".encode()))
        if credential == "token":
            headers.append((b"authorization", f"Bearer {world.tokens[actor]}".encode()))
        communicator = WebsocketCommunicator(application, probe.path, headers=headers)
        opened.append(communicator)
        connected, _ = await communicator.connect(timeout=WAIT)
        assert connected, "sockets are accepted, then closed with a code"
        sockets.append((actor, credential, expected, communicator, []))
    closes = await asyncio.gather(*(read_until_quiet(communicator, received) for *_, communicator, received in sockets))
    await append_live_events()  # open sockets must pass it on (or not: the outsider's list)
    later = await asyncio.gather(
        *(
            read_until_quiet(communicator, received, probe.quiet * load_factor())
            for (*_, communicator, received), code in zip(sockets, closes)
            if code is None
        )
    )
    outcomes = iter(later)
    mismatches = []
    for (actor, credential, expected, _, received), code in zip(sockets, closes):
        outcome = code or next(outcomes)
        if outcome is None:
            text = "".join(received)
            outcome = "open " + ("+P" if "alpha-" in text else "-P" if OUTSIDER_SESSION in text else "(nothing arrived)")
        if outcome != expected:
            mismatches.append(f"  {actor} ({credential}): expected {expected!r}, got {outcome!r}")
    assert not mismatches, f"{route} {probe.path}:\n" + "\n".join(mismatches)
