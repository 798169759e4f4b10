"""The world of the permission matrix (tests/test_permission_matrix.py).

Project "alpha" holds three small sessions: `alpha-open` (a turn left open:
recovery has something to append), `alpha-closed` (turns closed, so it forks
at "last", and a call dangling outside any turn for the turn-blind patch)
and `alpha-recovered` (with a recovery record); alpha-closed has a note by the member
and one by the admin. Project "beta" holds the
outsider's own session, `beta-own`, recovered too.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from axes.models import AccessAttempt, AccessFailureLog, AccessLog
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.contrib.contenttypes.models import ContentType
from django.db import connection, transaction
from django.test import Client

from sessions_app import selectors, services
from sessions_app.log import blob as log_blob
from sessions_app.log import recovery as log_recovery
from sessions_app.log.events import validate_batch
from sessions_app.models import (
    ApiToken,
    AuditEntry,
    AutoRecoveryPolicy,
    CallCheck,
    Event,
    Membership,
    ModelPrice,
    Note,
    Project,
    RecoveryRecord,
    Role,
    Session,
    ToolPolicy,
    Verdict,
    WebhookEndpoint,
)
from sessions_app.selectors import access
from sessions_app.services import notify
from tests.access import token_for
from tests.sessions_app import factories as f

ACTORS = ("anonymous", "outsider", "viewer", "member", "operator", "admin")
STAFF = frozenset({"outsider", "operator", "admin"})  # as `create_token --staff` makes operators staff
ALPHA_SESSIONS = ("alpha-open", "alpha-closed", "alpha-recovered")
OUTSIDER_SESSION = "beta-own"

CLOSED_TURN = [f.event("turn_start", turn=1), f.assistant(calls=["c1"]), f.tool_result("c1"), f.event("turn_end", turn=1, steps=0, reason="complete")]


def session_with(session_id: str, project: Project, events: list[dict]) -> Session:
    services.create_session(session_id=session_id, project=project, agent_name="matrix")
    services.append_events(session_id=session_id, events=validate_batch(events))
    return Session.objects.get(pk=session_id)


COUNTED = (Session, Event, Note, RecoveryRecord, Verdict, ToolPolicy, ModelPrice, AutoRecoveryPolicy, ApiToken, Membership, Project, WebhookEndpoint, Group, AccessAttempt, AccessLog, AccessFailureLog)


def stored_state() -> tuple:
    """What a write could change: rows added or removed (the audit log aside: refusals are audited), roles, usable tokens,
    notes' text and tags (an edit adds no row), projects' settings, tool policies' and webhooks' settings and secrets."""
    tables = [model._meta.db_table for model in (*COUNTED, get_user_model())]
    with connection.cursor() as cursor:  # one round trip for the counts
        cursor.execute("SELECT " + ", ".join(f"(SELECT COUNT(*) FROM {connection.ops.quote_name(table)})" for table in tables))
        counts = cursor.fetchone()
    return (
        *counts,
        ApiToken.objects.usable().count(),
        sorted(Membership.objects.values_list("project_id", "user_id", "role")),
        sorted(Note.objects.values_list("pk", "text", "tags")),
        sorted(Project.objects.values_list("pk", "retention_days", "auto_recover_settled")),
        sorted(ToolPolicy.objects.values_list("pk", "side_effect", "note", "receipt_pointer", "check_url", "check_secret")),
        sorted(map(str, WebhookEndpoint.objects.values_list("pk", "url", "agent_patterns", "kinds", "enabled", "slack", "secret"))),
        # Verdicts (a withdrawal adds no row) and reconciler checks queued.
        sorted(map(str, Verdict.objects.values_list("pk", "withdrawn_at"))),
        sorted(map(str, CallCheck.objects.values_list("pk", "state", "next_at"))),
    )


@dataclass
class World:
    values: dict  # what probe paths and bodies are formatted with
    users: dict  # actor -> user (anonymous: None)
    tokens: dict  # actor -> bearer secret of its role's scopes
    cookies: dict  # actor -> its login session's cookie (a logout probe ends it only inside its rolled-back savepoint)

    def client(self, actor: str, credential: str) -> Client:
        if credential == "token":
            return Client(headers={"Authorization": f"Bearer {self.tokens[actor]}"})
        client = Client()
        if actor in self.cookies:
            client.cookies[settings.SESSION_COOKIE_NAME] = self.cookies[actor]
        return client

    def check(self, probe, actor: str, credential: str) -> str | None:
        """Make the request and check its outcome; None when it is as expected, else what happened.

        Each attempt runs in a savepoint rolled back afterwards, so every actor
        meets the same world (an operator's recovery does not leave the admin
        nothing to recover).
        """
        path = probe.path.format(**self.values)
        expected = probe.expect[actor]
        client = self.client(actor, credential)
        write = probe.method != "GET"
        before = stored_state() if write else None
        with transaction.atomic():
            data = self.fill(probe.data if probe.data is not None else {})
            if not write:
                response = client.get(path)
            elif probe.api:
                response = client.generic(probe.method, path, json.dumps(data), content_type="application/json")
            else:
                response = client.post(path, data)
            after = stored_state() if write else None
            transaction.set_rollback(True)
        problems = self.problems(response, expected, stored=after != before, write=write)
        if not problems:
            return None
        return f"  {actor} ({credential}) {probe.method} {path}: expected {expected!r}; {'; '.join(problems)}"

    def fill(self, data):
        if isinstance(data, str):
            whole = re.fullmatch(r"\{(\w+)\}", data)
            return self.values[whole.group(1)] if whole else data.format(**self.values)
        if isinstance(data, dict):
            return {key: self.fill(value) for key, value in data.items()}
        if isinstance(data, list):
            return [self.fill(value) for value in data]
        return data

    def problems(self, response, expected: str, *, stored: bool, write: bool) -> list[str]:
        status, *marks = expected.format(**self.values).split()
        problems = []
        if response.status_code != int(status):
            problems.append(f"got {response.status_code} {response.get('Location', '')}".rstrip())
        location = next((mark for mark in marks if mark.startswith("/")), None)
        if location is not None and not response.get("Location", "").startswith(location):
            problems.append(f"Location {response.get('Location')!r}")
        wants_store = "stored" in marks
        if write and stored != wants_store:
            problems.append("the write was stored" if stored else "nothing was stored")
        return problems + shown_problems(response.content.decode(errors="replace"), marks)

def shown_problems(text: str, marks: list[str]) -> list[str]:
    """+P: an alpha session is shown; -P: nothing of alpha is, but the outsider's own project is; +TEXT: TEXT is shown."""
    problems = []
    for mark in marks:
        if mark == "+P" and not any(session_id in text for session_id in ALPHA_SESSIONS):
            problems.append("alpha's sessions are not shown")
        elif mark == "-P" and ("alpha" in text or "beta" not in text):
            problems.append("alpha is shown" if "alpha" in text else "the outsider's own project is not shown")
        elif mark.startswith("+") and mark != "+P" and mark[1:] not in text:
            problems.append(f"{mark[1:]!r} is not shown")
    return problems


def build_world() -> World:
    users_model = get_user_model()
    alpha = Project.objects.create(slug="alpha", name="Alpha")
    beta = Project.objects.create(slug="beta", name="Beta")
    users = {"anonymous": None}
    tokens = {}
    for actor in ACTORS[1:]:
        user = users_model.objects.create_user(f"matrix-{actor}", is_staff=actor in STAFF)
        role, project = (Role.ADMIN, beta) if actor == "outsider" else (actor, alpha)
        tokens[actor] = token_for(user, role, project)
        users[actor] = user
    operator = users["operator"]
    newcomer = users_model.objects.create_user("matrix-newcomer")  # no member of anything yet

    session_with("alpha-open", alpha, f.worked_example())
    closed = session_with("alpha-closed", alpha, [f.user(), *CLOSED_TURN, f.assistant(calls=["c9"])])
    session_with("alpha-recovered", alpha, f.worked_example())
    alpha_record = services.recover(session_id="alpha-recovered", user=operator).record
    session_with(OUTSIDER_SESSION, beta, f.worked_example())
    services.recover(session_id=OUTSIDER_SESSION, user=users["outsider"])

    # A note by the member (its author may change it) and one by the admin (the member may not) on alpha's closed session.
    member_note = services.add_note(actor=access.Actor(user=users["member"]), session_id="alpha-closed", text="member's", seq=0)
    admin_note = services.add_note(actor=access.Actor(user=users["admin"]), session_id="alpha-closed", text="admin's")

    # A verdict to withdraw on the closed session's answered call.
    Verdict.objects.create(session=closed, call_id="c1", outcome="happened", evidence="matrix", source="person", by="matrix")

    open_session = Session.objects.get(pk="alpha-open")
    dangling = selectors.dangling_patch(closed)
    assert dangling and open_session.interrupted, "the world needs something to recover and to patch"
    group = Group.objects.create(name="matrix")
    policy = ToolPolicy.objects.create(pattern="matrix_*", side_effect=ToolPolicy.CLASSES[0][0])
    auto_policy = AutoRecoveryPolicy.objects.create(agent_pattern="matrix-*")
    ToolPolicy.objects.create(project=alpha, pattern="alpha_*", side_effect=ToolPolicy.IDEMPOTENT)  # alpha's own
    # A public address (never contacted here), so the check at save time passes without TURNLOG_WEBHOOK_ALLOW_PRIVATE.
    webhook = notify.create_endpoint(project=alpha, actor=users["admin"], url="https://93.184.215.14/matrix")
    seen = {"user_agent": "matrix", "ip_address": "127.0.0.1", "username": "nobody", "http_accept": "*/*", "path_info": "/login/"}
    values = {
        "open": "alpha-open",
        "closed": "alpha-closed",
        "open_digest": selectors.recovery_plan(open_session).digest(open_session.event_count),
        "dangling_digest": log_recovery.repairs_digest(closed.event_count, dangling),
        "blob": log_blob.write_blob(selectors.session_log(closed), agent_name="matrix"),
        "closed_event": Event.objects.get(session=closed, seq=0).pk,
        "alpha_record": alpha_record.pk,
        "member_note": member_note.pk,
        "admin_note": admin_note.pk,
        "session_type": ContentType.objects.get_for_model(Session).pk,
        "group": group.pk,
        "policy": policy.pk,
        "auto_policy": auto_policy.pk,
        "webhook_pk": webhook.pk,
        "viewer_pk": users["viewer"].pk,
        "admin_pk": users["admin"].pk,
        "newcomer": newcomer.get_username(),
        "alpha_pk": alpha.pk,
        "audit_entry": AuditEntry.objects.filter(project=alpha).latest("pk").pk,
        "viewer_token_pk": ApiToken.objects.filter(user=users["viewer"]).get().pk,
        "access_attempt": AccessAttempt.objects.create(**seen, get_data="", post_data="", failures_since_start=1).pk,
        "access_log": AccessLog.objects.create(**seen).pk,
        "access_failure": AccessFailureLog.objects.create(**seen).pk,
    }
    return World(values=values, users=users, tokens=tokens, cookies={actor: login_cookie(users[actor]) for actor in ACTORS[1:]})


def login_cookie(user) -> str:
    client = Client()
    client.force_login(user)
    return client.cookies[settings.SESSION_COOKIE_NAME].value
