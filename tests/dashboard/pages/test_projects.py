"""Project pages (dashboard.pages.projects) and the session list's project scoping, through Django's test client;
the list socket's project filter through the real ASGI application."""

from __future__ import annotations

import re

import pytest
from channels.db import database_sync_to_async
from django.conf import settings
from django.test import Client
from django.utils.html import escape

from sessions_app import services
from sessions_app.models import ApiToken, AuditEntry, Membership, Project, Role, hash_token
from tests.access import member, token_for
from tests.conftest import ApiClient
from tests.dashboard.conftest import QUIET, WAIT
from tests.dashboard.live.test_sessions import browser_socket

pytestmark = pytest.mark.django_db

HOSTILE = '<script>alert("x")</script>'


def text_of(response) -> str:
    return response.content.decode()


@pytest.fixture
def team():
    return Project.objects.create(slug="team", name="The Team")


@pytest.fixture
def admin(django_user_model, team):
    user = django_user_model.objects.create_user("alice")
    member(user, Role.ADMIN, team)
    return user


def logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def as_admin(admin):
    return logged_in(admin)


def audit_actions(project) -> list[str]:
    return list(AuditEntry.objects.filter(project=project).order_by("created_at", "id").values_list("action", flat=True))


# Who may see what


@pytest.mark.parametrize("path", ["/projects/", "/projects/team/", "/projects/team/tokens", "/projects/team/audit"])
def test_every_project_page_needs_a_login(client, team, path):
    response = client.get(path)
    assert response.status_code == 302 and response.url.startswith("/login/")


def test_the_project_list_shows_each_project_with_the_users_role_and_session_count(django_user_model, team):
    user = django_user_model.objects.create_user("bob")
    member(user, Role.VIEWER)  # the default project
    member(user, Role.ADMIN, team)
    Project.objects.create(slug="elsewhere", name="Elsewhere")
    services.create_session(session_id="d1")
    services.create_session(session_id="t1", project=team)
    services.create_session(session_id="t2", project=team)
    page = text_of(logged_in(user).get("/projects/"))
    rows = dict(re.findall(r'<tr id="project-([a-z]+)">(.*?)</tr>', page, re.S))
    assert set(rows) == {"default", "team"}  # not "elsewhere"
    assert "viewer" in rows["default"] and '<td class="num">1</td>' in rows["default"] and "admins only" in rows["default"]
    assert "admin" in rows["team"] and '<td class="num">2</td>' in rows["team"] and 'href="/projects/team/"' in rows["team"]
    assert 'href="/?project=team"' in rows["team"]


def test_someone_in_no_project_is_told_to_ask_an_admin(django_user_model):
    services.create_session(session_id="unseen-session")
    client = logged_in(django_user_model.objects.create_user("newcomer"))
    for path in ("/projects/", "/"):
        page = text_of(client.get(path))
        assert "ask a project admin to add you" in page and "unseen-session" not in page, path


@pytest.mark.parametrize("role", [Role.VIEWER, Role.MEMBER, Role.OPERATOR])
def test_members_without_the_admin_role_get_a_403_page_that_names_the_admins(django_user_model, team, admin, role):
    user = django_user_model.objects.create_user("carol")
    member(user, role, team)
    client = logged_in(user)
    for path in ("/projects/team/", "/projects/team/tokens", "/projects/team/audit"):
        response = client.get(path)
        assert response.status_code == 403, path
        page = text_of(response)
        assert "Only admins manage The Team" in page and f"<strong>{role}</strong>" in page and "<strong>alice</strong>" in page
    response = client.post("/projects/team/", {"username": "carol", "role": Role.ADMIN})
    assert response.status_code == 403
    assert Membership.objects.get(project=team, user=user).role == role
    denied = AuditEntry.objects.filter(project=team, action=AuditEntry.ACCESS_DENIED, actor=user)
    # Four refusals of the same thing within a minute: recorded once.
    assert denied.count() == 1 and {e.detail["capability"] for e in denied} == {"admin"}


def test_outsiders_and_unknown_projects_get_a_404(django_user_model, team, admin):
    outsider = logged_in(django_user_model.objects.create_user("mallory"))
    for path in ("/projects/team/", "/projects/team/tokens", "/projects/team/audit", "/projects/nope/"):
        assert outsider.get(path).status_code == 404, path
    assert outsider.post("/projects/team/", {"username": "mallory", "role": Role.ADMIN}).status_code == 404
    assert not Membership.objects.filter(project=team, user__username="mallory").exists()
    assert logged_in(admin).get("/projects/nope/").status_code == 404


def test_a_superuser_manages_every_project_without_being_a_member(django_user_model, team, admin):
    root = logged_in(django_user_model.objects.create_superuser("root", password="x"))
    page = text_of(root.get("/projects/team/"))
    assert "alice" in page and "Add a member" in page


def test_every_post_needs_the_csrf_token(admin):
    client = Client(enforce_csrf_checks=True)
    client.force_login(admin)
    assert client.post("/projects/team/", {"username": "alice", "role": Role.VIEWER}).status_code == 403
    assert client.post("/projects/team/tokens", {"owner": admin.pk, "scopes": ["read"]}).status_code == 403
    assert not ApiToken.objects.exists()


# Members


def test_an_admin_adds_a_member_changes_their_role_and_removes_them(as_admin, django_user_model, team):
    dave = django_user_model.objects.create_user("dave")
    response = as_admin.post("/projects/team/", {"username": "dave", "role": Role.VIEWER}, follow=True)
    assert "Added dave with the role viewer." in text_of(response)
    assert Membership.objects.get(project=team, user=dave).role == Role.VIEWER
    assert re.search(r'<tr id="member-%d">.*?<option value="viewer" selected>' % dave.pk, text_of(response), re.S)

    response = as_admin.post(f"/projects/team/members/{dave.pk}", {"action": "change", "role": Role.OPERATOR}, follow=True)
    assert "dave&#x27;s role is now operator (was viewer)." in text_of(response)
    assert Membership.objects.get(project=team, user=dave).role == Role.OPERATOR

    response = as_admin.post(f"/projects/team/members/{dave.pk}", {"action": "remove"}, follow=True)
    assert "Removed dave from team." in text_of(response)
    assert not Membership.objects.filter(project=team, user=dave).exists()

    assert audit_actions(team)[-3:] == [AuditEntry.MEMBER_ADDED, AuditEntry.MEMBER_CHANGED, AuditEntry.MEMBER_REMOVED]
    audit = text_of(as_admin.get("/projects/team/audit"))
    assert audit.count("<td><code>dave</code></td>") == 3
    assert "Member&#x27;s role changed" in audit and '<td class="detail">from viewer to operator</td>' in audit


def test_adding_an_unknown_user_or_a_member_twice_shows_the_error_in_the_form(as_admin, django_user_model, team):
    response = as_admin.post("/projects/team/", {"username": "ghost", "role": Role.MEMBER})
    assert response.status_code == 422
    page = text_of(response)
    assert "There is no user named &#x27;ghost&#x27;" in page and 'value="ghost"' in page and 'aria-invalid="true"' in page

    response = as_admin.post("/projects/team/", {"username": "alice", "role": Role.VIEWER})
    assert response.status_code == 422 and "alice already is a member of this project (role: admin)" in text_of(response)
    django_user_model.objects.create_user("erin")
    response = as_admin.post("/projects/team/", {"username": "erin", "role": "overlord"})
    assert response.status_code == 422 and "Select a valid choice" in text_of(response)
    assert list(Membership.objects.filter(project=team).values_list("user__username", flat=True)) == ["alice"]


def test_a_bad_role_change_names_what_was_wrong(as_admin, django_user_model, team):
    frank = django_user_model.objects.create_user("frank")
    member(frank, Role.MEMBER, team)
    response = as_admin.post(f"/projects/team/members/{frank.pk}", {"action": "change", "role": "overlord"})
    assert response.status_code == 422 and "unknown role &#x27;overlord&#x27;" in text_of(response)
    response = as_admin.post(f"/projects/team/members/{frank.pk}", {"action": "promote"})
    assert response.status_code == 422 and "unknown action &#x27;promote&#x27;" in text_of(response)
    assert as_admin.post("/projects/team/members/999999", {"action": "remove"}).status_code == 404
    assert as_admin.get(f"/projects/team/members/{frank.pk}").status_code == 405
    assert Membership.objects.get(project=team, user=frank).role == Role.MEMBER


def test_the_last_admin_can_neither_be_removed_nor_lowered(as_admin, admin, django_user_model, team):
    for data in ({"action": "remove"}, {"action": "change", "role": Role.OPERATOR}):
        response = as_admin.post(f"/projects/team/members/{admin.pk}", data)
        assert response.status_code == 409
        assert "Nothing changed: alice is the only admin of team: make someone else an admin first." in text_of(response)
    assert Membership.objects.get(project=team, user=admin).role == Role.ADMIN
    with pytest.raises(services.LastAdmin):
        services.set_membership(project=team, user=admin, role=None)

    # With a second admin, the first may step down, and no longer sees the page.
    gina = django_user_model.objects.create_user("gina")
    member(gina, Role.ADMIN, team)
    response = as_admin.post(f"/projects/team/members/{admin.pk}", {"action": "change", "role": Role.MEMBER})
    assert response.status_code == 302 and response.url == "/projects/"
    assert as_admin.get("/projects/team/").status_code == 403
    assert Membership.objects.get(project=team, user=admin).role == Role.MEMBER


# Tokens


def create_token(client, owner, scopes=("read",), **fields):
    return client.post("/projects/team/tokens", {"owner": owner.pk, "scopes": list(scopes), **fields})


def test_a_new_tokens_secret_is_shown_once_and_never_again(as_admin, admin, team):
    response = create_token(as_admin, admin, scopes=["read", "append"], name="ci-agent", expires_in_days="30")
    assert response.status_code == 200
    assert "no-store" in response["Cache-Control"]
    page = text_of(response)
    secret = re.search(r'id="token-secret" class="secret" value="([^"]+)"', page)[1]
    assert "this is the only time it is shown" in page
    token = ApiToken.objects.get(token_sha256=hash_token(secret))
    assert (token.user, token.project, token.scopes, token.name, token.created_by) == (admin, team, ["append", "read"], "ci-agent", admin)
    assert 29 < (token.expires_at - token.created_at).total_seconds() / 86400 <= 30

    for path in ("/projects/team/tokens", "/projects/team/audit", f"/projects/team/tokens/{token.pk}/revoke"):
        shown = text_of(as_admin.get(path))
        assert secret not in shown and secret[10:] not in shown, path
    listing = text_of(as_admin.get("/projects/team/tokens"))
    row = re.search(rf'<tr id="token-{token.pk}" class="token-active">(.*?)</tr>', listing, re.S)[1]
    assert f"<code>{token.prefix}…</code>" in row and "ci-agent" in row and "append, read" in row and "alice" in row
    assert AuditEntry.objects.get(project=team, action=AuditEntry.TOKEN_CREATED).target == token.prefix
    assert ApiClient(secret).get("/api/v1/sessions").status_code == 200


def test_a_token_can_be_made_for_a_member_within_their_role_only(as_admin, django_user_model, team):
    viewer = django_user_model.objects.create_user("hank")
    member(viewer, Role.VIEWER, team)
    # The form for that owner offers only the scopes a viewer's token may have.
    form = text_of(as_admin.get("/projects/team/tokens", {"owner": viewer.pk}, headers={"HX-Request": "true", "HX-Target": "token-form"}))
    assert form.startswith('\n<form id="token-form"') and "<html" not in form
    assert re.search(r'name="scopes" value="read" checked>', form)
    assert re.search(r'name="scopes" value="append" disabled>', form) and "(not for a viewer)" in form

    response = create_token(as_admin, viewer, scopes=["read", "append"])
    assert response.status_code == 422
    assert "hank&#x27;s role is viewer, whose tokens may not have append." in text_of(response)
    response = create_token(as_admin, viewer, scopes=[])
    assert response.status_code == 422 and "This field is required." in text_of(response)
    response = create_token(as_admin, viewer, expires_in_days="0")
    assert response.status_code == 422 and "greater than or equal to 1" in text_of(response)
    outsider = django_user_model.objects.create_user("ivan")
    response = create_token(as_admin, outsider)
    assert response.status_code == 422 and "Select a valid choice" in text_of(response)
    assert not ApiToken.objects.exists()

    assert create_token(as_admin, viewer, name="reader").status_code == 200
    assert ApiToken.objects.get().user == viewer


def test_a_revoked_token_answers_401_on_the_api(as_admin, admin, team):
    secret = token_for(admin, Role.ADMIN, team, name="old")
    api = ApiClient(secret)
    assert api.get("/api/v1/sessions").status_code == 200
    token = ApiToken.objects.get()
    confirm = text_of(as_admin.get(f"/projects/team/tokens/{token.pk}/revoke"))
    assert f"Revoke <code>{token.prefix}…</code> (old)?" in confirm and 'method="post"' in confirm

    response = as_admin.post(f"/projects/team/tokens/{token.pk}/revoke", follow=True)
    assert f"Revoked {token.prefix}… (old): it no longer authenticates." in text_of(response)
    assert f'<tr id="token-{token.pk}" class="token-revoked">' in text_of(response)
    assert api.get("/api/v1/sessions").status_code == 401
    response = as_admin.post(f"/projects/team/tokens/{token.pk}/revoke", follow=True)
    assert "was already revoked" in text_of(response)
    assert audit_actions(team).count(AuditEntry.TOKEN_REVOKED) == 1
    assert AuditEntry.objects.get(action=AuditEntry.TOKEN_REVOKED).actor == admin


def test_tokens_of_other_projects_are_not_found_here(as_admin, django_user_model):
    stranger = django_user_model.objects.create_user("judy")
    token_for(stranger)  # the default project, where alice is nobody
    other = ApiToken.objects.get(user=stranger)
    assert as_admin.get(f"/projects/team/tokens/{other.pk}/revoke").status_code == 404
    assert as_admin.post(f"/projects/team/tokens/{other.pk}/revoke").status_code == 404
    other.refresh_from_db()
    assert other.state == "active"
    assert f"{other.prefix}" not in text_of(as_admin.get("/projects/team/tokens"))


# Audit log


def test_the_audit_log_is_newest_first_paginated_and_filtered_by_action(as_admin, admin, team):
    for n in range(55):
        services.audit(project=team, actor=admin, action=AuditEntry.FORK, target=f"s-{n:02d}")
    services.audit(project=Project.default(), actor=admin, action=AuditEntry.FORK, target="not-here")
    first = text_of(as_admin.get("/projects/team/audit"))
    targets = re.findall(r'<td><a href="/sessions/s-\d\d/"><code>(s-\d\d)</code></a></td>', first)
    assert targets == [f"s-{n:02d}" for n in range(54, 4, -1)]
    cursor = re.search(r'href="\?cursor=([^"&]+)"', first)[1]
    second = text_of(as_admin.get("/projects/team/audit", {"cursor": cursor}))
    assert re.findall(r'<td><a href="/sessions/s-\d\d/"><code>(s-\d\d)</code></a></td>', second) == ["s-04", "s-03", "s-02", "s-01", "s-00"]
    assert "Older entries" not in second and "not-here" not in first + second

    forks = text_of(as_admin.get("/projects/team/audit", {"action": AuditEntry.MEMBER_ADDED}))
    assert "s-54" not in forks and re.search(r'<td><a href="/projects/team/#member-\d+"><code>alice</code></a></td>', forks)
    assert '<option value="member_added" selected>' in forks

    for params in ({"action": "nonsense"}, {"cursor": "not-a-cursor"}, {"cursor": "WyJ4IiwgMV0"}):
        response = as_admin.get("/projects/team/audit", params)
        assert response.status_code == 400, params
        assert "<h1>This page cannot read its address</h1>" in text_of(response)  # the styled page (tests/dashboard/pages/test_bad_requests.py)


@pytest.mark.parametrize("cursor", [
    "WyIyMDI2LTAxLTAxVDAwOjAwOjAwKzAwOjAwIiwgMTAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMF0",  # an id beyond 64 bits
    "WyIyMDI2LTAxLTAxVDAwOjAwOjAwIiwgNV0",  # a time without its zone
    "WyI5OTk5LTEyLTMxVDIzOjU5OjU5KzAwOjAwIiwgLTFd",  # the last moment of year 9999, id -1
    "WzEsIDJd",  # a number for the time
])  # fmt: skip
def test_a_forged_audit_cursor_answers_a_page_or_a_400_never_a_500(as_admin, cursor):
    assert as_admin.get("/projects/team/audit", {"cursor": cursor}).status_code in (200, 400)


def test_refused_requests_appear_in_the_audit_log(as_admin, django_user_model, team):
    viewer = django_user_model.objects.create_user("kim")
    member(viewer, Role.VIEWER, team)
    services.create_session(session_id="precious", project=team)
    assert logged_in(viewer).post("/sessions/precious/fork", {"boundary": "last"}).status_code == 403
    page = text_of(as_admin.get("/projects/team/audit", {"action": AuditEntry.ACCESS_DENIED}))
    row = re.search(r'<tr id="audit-\d+" class="audit-access_denied">(.*?)</tr>', page, re.S)[1]
    assert "<td>kim</td>" in row and '<a href="/sessions/precious/"><code>precious</code></a>' in row
    assert '<td class="detail">may not fork sessions</td>' in row


# Escaping


def test_hostile_usernames_and_token_names_are_escaped_everywhere(as_admin, admin, django_user_model, team):
    hostile = django_user_model.objects.create_user(HOSTILE)  # create_user does not validate usernames
    as_admin.post("/projects/team/", {"username": HOSTILE, "role": Role.VIEWER})
    assert Membership.objects.filter(project=team, user=hostile).exists()
    created = text_of(create_token(as_admin, hostile, name=HOSTILE))
    token = ApiToken.objects.get()
    as_admin.get(f"/projects/team/tokens/{token.pk}/revoke")
    pages = {
        "created": created,
        "members": text_of(as_admin.get("/projects/team/")),
        "tokens": text_of(as_admin.get("/projects/team/tokens")),
        "revoke": text_of(as_admin.get(f"/projects/team/tokens/{token.pk}/revoke")),
        "audit": text_of(as_admin.get("/projects/team/audit")),
        "refused": text_of(as_admin.post("/projects/team/", {"username": HOSTILE, "role": Role.VIEWER})),
    }
    for name, page in pages.items():
        assert HOSTILE not in page and "<script>alert" not in page, name
        assert escape(HOSTILE) in page, name


# The session list


def test_the_session_list_filters_by_project_and_shows_the_column_across_projects(django_user_model, team):
    user = django_user_model.objects.create_user("leo")
    member(user)
    member(user, Role.VIEWER, team)
    secret_project = Project.objects.create(slug="secret", name="Secret")
    services.create_session(session_id="in-default")
    services.create_session(session_id="in-team", project=team)
    services.create_session(session_id="in-secret", project=secret_project)
    client = logged_in(user)

    page = text_of(client.get("/"))
    assert '<th class="col-project">Project</th>' in page and "in-default" in page and "in-team" in page and "in-secret" not in page
    assert '<a href="/?project=team">The Team</a>' in page
    assert re.search(r'<select name="project".*?<option value="default">Default</option>\s*<option value="team">The Team</option>\s*</select>', page, re.S)
    assert "secret" not in re.search(r'<select name="project".*?</select>', page, re.S)[0]
    assert 'ws-connect="/ws/sessions/live?status=&amp;q=&amp;project=&amp;"' in page

    only_team = text_of(client.get("/", {"project": "team"}))
    assert "in-team" in only_team and "in-default" not in only_team and "col-project" not in only_team
    assert '<option value="team" selected>' in only_team and "Sessions of The Team" in only_team
    assert 'ws-connect="/ws/sessions/live?status=&amp;q=&amp;project=team&amp;"' in only_team

    # Another team's slug is not a filter this user may use: the list stays theirs.
    not_theirs = text_of(client.get("/", {"project": "secret"}))
    assert "in-secret" not in not_theirs and "in-default" in not_theirs


def test_one_project_shows_no_selector_and_no_column(django_user_model):
    user = django_user_model.objects.create_user("mia")
    member(user)
    services.create_session(session_id="only")
    page = text_of(logged_in(user).get("/"))
    assert "only" in page and "<th>Project</th>" not in page and 'name="project"' not in page


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("slow_poll", "fresh_layer")
async def test_the_list_socket_sends_only_rows_of_its_project(django_user_model, sid):
    @database_sync_to_async
    def setup():
        user = django_user_model.objects.create_user("nina")
        team = Project.objects.create(slug=f"team-{sid}", name="Team")
        member(user)
        member(user, Role.MEMBER, team)
        return team, logged_in(user).cookies[settings.SESSION_COOKIE_NAME].value

    team, cookie = await setup()
    only_team = await browser_socket(f"/ws/sessions/live?project={team.slug}", cookie)
    everything = await browser_socket("/ws/sessions/live", cookie)

    await database_sync_to_async(services.create_session)(session_id=f"{sid}-default")
    frame = await everything.receive_from(timeout=WAIT)
    assert f"{sid}-default" in frame and "?project=default" in frame  # the Project column, as on the page
    assert await only_team.receive_nothing(QUIET * 2)

    await database_sync_to_async(services.create_session)(session_id=f"{sid}-team", project=team)
    frame = await only_team.receive_from(timeout=WAIT)
    assert f"{sid}-team" in frame and "?project=" not in frame  # one project: no column
    assert f"{sid}-team" in await everything.receive_from(timeout=WAIT)
