"""docs/api.md, Authentication and permissions: projects, roles and token scopes over HTTP."""

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from sessions_app import services
from sessions_app.log.events import validate_batch
from sessions_app.models import ApiToken, AuditEntry, Event, Project, RecoveryRecord, Role, Scope, Session
from tests.access import member, token_for
from tests.conftest import ApiClient
from tests.sessions_app import factories as f

pytestmark = pytest.mark.django_db

# Every endpoint that names a session, with a body it would accept for a session it may use.
READS = ["", "/events", "/messages", "/export", "/recovery-plan", "/dangling-calls", "/notes", "/calls"]
WRITES = {
    "/events": {"events": [f.user()]},
    "/recover": {},
    "/patch-dangling-calls": {},
    "/fork": {"boundary": "last"},
    "/notes": {"text": "checked"},
}


@pytest.fixture
def alpha():
    return Project.objects.create(slug="alpha", name="Alpha")


@pytest.fixture
def beta():
    return Project.objects.create(slug="beta", name="Beta")


@pytest.fixture
def beta_session(beta):
    """A closed session of project beta that called a tool: every endpoint would answer it with a 2xx."""
    session = services.create_session(session_id="b1", agent_name="beta-bot", project=beta)
    services.append_events(session_id="b1", events=validate_batch([f.user("secret"), f.assistant(calls=["zz"]), f.tool_result("zz")]))
    return session


def user_named(django_user_model, name):
    return django_user_model.objects.create_user(name)


def client_of(django_user_model, name, role, project, **options) -> ApiClient:
    return ApiClient(token_for(user_named(django_user_model, name), role=role, project=project, **options))


def assert_error(response, status, error):
    assert response.status_code == status, response.content
    body = response.json()
    assert body["error"] == error and isinstance(body["detail"], str) and body["detail"], body
    return body


# Another project's sessions do not exist --------------------------------------------


def test_every_session_endpoint_answers_404_for_another_projects_session(django_user_model, alpha, beta_session):
    # An operator of alpha: every right there, none in beta.
    api = client_of(django_user_model, "ann", Role.OPERATOR, alpha)
    for suffix in READS:
        body = assert_error(api.get(f"/api/v1/sessions/b1{suffix}"), 404, "not_found")
        assert "beta" not in body["detail"] and "secret" not in body["detail"]
    for suffix, payload in WRITES.items():
        assert_error(api.post(f"/api/v1/sessions/b1{suffix}", payload), 404, "not_found")
    assert Event.objects.count() == 3 and Session.objects.count() == 1 and not RecoveryRecord.objects.exists()
    # Each refusal is in beta's audit log, none in alpha's; once per capability within a minute.
    refused = AuditEntry.objects.filter(action=AuditEntry.ACCESS_DENIED)
    recorded = refused.filter(project__slug="beta", target="b1", actor_name="ann").values_list("detail__capability", flat=True)
    assert sorted(recorded) == ["append", "fork", "read", "recover"]
    assert not refused.exclude(project__slug="beta").exists()
    # The same requests from an operator of beta succeed: the 404s came from the project, not the requests.
    owner = client_of(django_user_model, "bob", Role.OPERATOR, beta_session.project)
    for suffix in READS:
        assert owner.get(f"/api/v1/sessions/b1{suffix}").status_code == 200, suffix
    for suffix, payload in WRITES.items():
        assert owner.post(f"/api/v1/sessions/b1{suffix}", payload).status_code in (200, 201), suffix


def test_a_404_for_another_projects_session_looks_like_one_for_an_id_that_exists_nowhere(django_user_model, alpha, beta_session):
    api = client_of(django_user_model, "ann", Role.MEMBER, alpha)
    hidden, ghost = api.get("/api/v1/sessions/b1").json(), api.get("/api/v1/sessions/ghost").json()
    assert hidden == {**ghost, "detail": ghost["detail"].replace("ghost", "b1")}


def test_another_projects_sessions_are_absent_from_the_list_and_its_search(django_user_model, alpha, beta_session):
    api = client_of(django_user_model, "ann", Role.MEMBER, alpha)
    services.create_session(session_id="a1", agent_name="alpha-bot", project=alpha)
    assert [s["id"] for s in api.get("/api/v1/sessions").json()["items"]] == ["a1"]
    beta_reader = client_of(django_user_model, "bob", Role.VIEWER, beta_session.project)
    for q in ["b1", "beta-bot", "tool_zz"]:  # its id, its agent's name, a tool it called
        assert [s["id"] for s in beta_reader.get("/api/v1/sessions", {"q": q}).json()["items"]] == ["b1"], q
        assert api.get("/api/v1/sessions", {"q": q}).json()["items"] == [], q
    assert api.get("/api/v1/sessions", {"project": "beta"}).json()["items"] == []


def test_another_projects_calls_are_absent_from_the_fleet_whatever_the_filter(django_user_model, alpha, beta_session):
    api = client_of(django_user_model, "ann", Role.MEMBER, alpha)
    every = {"state": ["completed", "pending", "no_result", "error", "superseded", "tool_not_started", "tool_outcome_unknown"]}
    beta_reader = client_of(django_user_model, "bob", Role.VIEWER, beta_session.project)
    assert [c["session_id"] for c in beta_reader.get("/api/v1/calls", every).json()["items"]] == ["b1"]
    for extra in [{}, {"project": "beta"}, {"agent": "beta-bot"}, {"tool": "tool_zz"}]:
        assert api.get("/api/v1/calls", {**every, **extra}).json() == {"items": [], "next_cursor": None}, extra
    writer = client_of(django_user_model, "writer", Role.MEMBER, beta_session.project, scopes=[Scope.APPEND])
    assert writer.get("/api/v1/calls", every).json()["items"] == []  # the fleet holds what it may read


def test_the_project_filter_keeps_one_projects_sessions(django_user_model, alpha, beta, beta_session):
    user = user_named(django_user_model, "ann")
    member(user, Role.VIEWER, alpha)
    member(user, Role.VIEWER, beta)
    services.create_session(session_id="a1", project=alpha)
    browser = Client()
    browser.force_login(user)  # the login session reads every project of its user; a token reads only its own
    listed = lambda **params: sorted(s["id"] for s in browser.get("/api/v1/sessions", params).json()["items"])  # noqa: E731
    assert listed() == ["a1", "b1"]
    assert listed(project="alpha") == ["a1"]
    assert listed(project="beta") == ["b1"]
    assert listed(project="nowhere") == []


def test_the_session_json_names_its_project(django_user_model, alpha, beta):
    api = client_of(django_user_model, "ann", Role.MEMBER, alpha)
    created = api.post("/api/v1/sessions", {"id": "a1"})
    assert created.status_code == 201 and created.json()["project"] == "alpha"
    assert api.get("/api/v1/sessions/a1").json()["project"] == "alpha"
    assert api.get("/api/v1/sessions").json()["items"][0]["project"] == "alpha"
    fork = api.post("/api/v1/sessions/a1/fork", {"id": "a1-fork"})
    assert fork.status_code == 201 and fork.json()["project"] == "alpha"  # a fork stays in its parent's project


# Roles --------------------------------------------------------------------------------


def test_a_viewer_reads_but_may_not_append_fork_or_create(django_user_model, alpha):
    services.create_session(session_id="a1", project=alpha)
    services.append_events(session_id="a1", events=validate_batch([f.user()]))
    viewer = client_of(django_user_model, "vera", Role.VIEWER, alpha)
    for suffix in READS:
        assert viewer.get(f"/api/v1/sessions/a1{suffix}").status_code == 200, suffix
    assert [s["id"] for s in viewer.get("/api/v1/sessions").json()["items"]] == ["a1"]
    assert_error(viewer.post("/api/v1/sessions/a1/events", WRITES["/events"]), 403, "forbidden")
    assert_error(viewer.post("/api/v1/sessions/a1/fork", WRITES["/fork"]), 403, "forbidden")
    assert_error(viewer.post("/api/v1/sessions", {"id": "new"}), 403, "forbidden")
    assert_error(viewer.post("/api/v1/sessions/import?id=new", {"version": 2, "events": []}), 403, "forbidden")
    assert Event.objects.count() == 1 and list(Session.objects.values_list("id", flat=True)) == ["a1"]
    denied = AuditEntry.objects.filter(action=AuditEntry.ACCESS_DENIED, project=alpha)
    # Creating and importing are one refusal (append in project alpha), recorded once a minute.
    assert sorted(denied.values_list("target", "detail__capability")) == [("a1", "append"), ("a1", "fork"), ("project alpha", "append")]


def test_a_viewers_login_is_refused_like_their_token(django_user_model, alpha):
    services.create_session(session_id="a1", project=alpha)
    user = user_named(django_user_model, "vera")
    member(user, Role.VIEWER, alpha)
    browser = Client()
    browser.force_login(user)
    response = browser.post("/api/v1/sessions/a1/events", WRITES["/events"], content_type="application/json")
    assert_error(response, 403, "forbidden")
    assert "your role" in response.json()["detail"] and "fork" not in response.json()["detail"]


def test_a_member_may_not_recover_and_an_operator_may(django_user_model, alpha):
    services.create_session(session_id="a1", project=alpha)
    services.append_events(session_id="a1", events=validate_batch(f.worked_example()))
    member_api = client_of(django_user_model, "mia", Role.MEMBER, alpha)
    digest = member_api.get("/api/v1/sessions/a1/recovery-plan").json()["digest"]  # previewing needs only read
    assert_error(member_api.post("/api/v1/sessions/a1/recover", {"digest": digest}), 403, "forbidden")
    assert not RecoveryRecord.objects.exists() and Event.objects.count() == 10

    operator_api = client_of(django_user_model, "otto", Role.OPERATOR, alpha)
    recovered = operator_api.post("/api/v1/sessions/a1/recover", {"digest": digest})
    assert recovered.status_code == 200, recovered.content
    assert [e["seq"] for e in recovered.json()["appended"]] == [10, 11, 12]
    assert RecoveryRecord.objects.get().username == "otto"


# Creating ------------------------------------------------------------------------------


def test_an_id_taken_in_another_project_is_409_session_exists(django_user_model, alpha, beta_session):
    api = client_of(django_user_model, "ann", Role.MEMBER, alpha)
    assert_error(api.post("/api/v1/sessions", {"id": "b1"}), 409, "session_exists")
    blob = {"version": 2, "events": []}
    assert_error(api.post("/api/v1/sessions/import?id=b1", blob), 409, "session_exists")
    services.create_session(session_id="a1", project=alpha)
    assert_error(api.post("/api/v1/sessions/a1/fork", {"id": "b1"}), 409, "session_exists")
    assert Session.objects.get(pk="b1").project.slug == "beta" and Session.objects.count() == 2


def test_creating_in_a_project_one_is_not_a_member_of_is_404(django_user_model, alpha, beta):
    user = user_named(django_user_model, "ann")
    member(user, Role.MEMBER, alpha)
    browser = Client()
    browser.force_login(user)
    for project in ["beta", "nowhere"]:
        response = browser.post("/api/v1/sessions", {"id": "x", "project": project}, content_type="application/json")
        assert_error(response, 404, "not_found")
    assert not Session.objects.exists()


def test_a_token_of_one_project_cannot_create_in_another_even_where_its_owner_is_a_member(django_user_model, alpha, beta):
    user = user_named(django_user_model, "ann")
    member(user, Role.MEMBER, beta)
    api = ApiClient(token_for(user, role=Role.MEMBER, project=alpha))
    assert_error(api.post("/api/v1/sessions", {"id": "x", "project": "beta"}), 404, "not_found")
    assert_error(api.post("/api/v1/sessions/import?id=x&project=beta", {"version": 2, "events": []}), 404, "not_found")
    assert not Session.objects.exists()
    created = api.post("/api/v1/sessions", {"id": "x"})  # no project named: the token's
    assert created.status_code == 201 and created.json()["project"] == "alpha"


def test_a_login_in_several_projects_must_name_the_one_it_creates_in(django_user_model, alpha, beta):
    user = user_named(django_user_model, "ann")
    member(user, Role.MEMBER, alpha)
    member(user, Role.MEMBER, beta)
    browser = Client()
    browser.force_login(user)
    create = lambda body: browser.post("/api/v1/sessions", body, content_type="application/json")  # noqa: E731
    assert_error(create({"id": "x"}), 422, "project_required")
    response = create({"id": "x", "project": "beta"})
    assert response.status_code == 201 and response.json()["project"] == "beta"


def test_an_imported_parent_in_another_project_is_dropped_with_a_warning(django_user_model, alpha, beta_session):
    api = client_of(django_user_model, "ann", Role.MEMBER, alpha)
    parent_of = lambda session_id: {"session": {"id": "c", "agent_name": None, "parent": {"session_id": session_id, "seed_length": 1}}}  # noqa: E731
    response = api.post("/api/v1/sessions/import?id=child", {"version": 2, "events": [], **parent_of("b1")})
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["session"]["parent"] is None and body["session"]["project"] == "alpha"
    [warning] = body["warnings"]
    assert "'b1'" in warning and "imported without a parent" in warning
    # Worded as for an id that exists nowhere: the warning reveals nothing about beta.
    ghost = api.post("/api/v1/sessions/import?id=orphan", {"version": 2, "events": [], **parent_of("ghost")}).json()
    assert ghost["warnings"] == [warning.replace("'b1'", "'ghost'")]
    assert Session.objects.get(pk="child").parent_id is None


# Tokens ----------------------------------------------------------------------------------


def test_a_token_with_only_append_appends_but_may_not_read(django_user_model, alpha):
    services.create_session(session_id="a1", project=alpha)
    api = client_of(django_user_model, "writer", Role.MEMBER, alpha, scopes=[Scope.APPEND])
    response = api.post("/api/v1/sessions/a1/events", WRITES["/events"])
    assert response.status_code == 201 and response.json() == {"first_seq": 0, "next_seq": 1}
    body = assert_error(api.get("/api/v1/sessions/a1/events"), 403, "forbidden")
    assert "'read' scope" in body["detail"]
    assert_error(api.get("/api/v1/sessions/a1"), 403, "forbidden")
    assert api.get("/api/v1/sessions").json()["items"] == []  # the list holds what it may read
    assert_error(api.post("/api/v1/sessions/a1/fork", {}), 403, "forbidden")


def test_an_expired_token_is_unauthenticated(django_user_model, alpha):
    services.create_session(session_id="a1", project=alpha)
    secret = token_for(user_named(django_user_model, "ann"), role=Role.MEMBER, project=alpha)
    api = ApiClient(secret)
    assert api.get("/api/v1/sessions/a1").status_code == 200
    ApiToken.objects.filter(user__username="ann").update(expires_at=timezone.now() - timedelta(seconds=1))
    assert_error(api.get("/api/v1/sessions/a1"), 401, "unauthenticated")
    assert_error(api.post("/api/v1/sessions/a1/events", WRITES["/events"]), 401, "unauthenticated")
    assert not Event.objects.exists()


def test_a_token_that_expires_later_still_works(django_user_model, alpha):
    services.create_session(session_id="a1", project=alpha)
    api = client_of(django_user_model, "ann", Role.MEMBER, alpha, expires_at=timezone.now() + timedelta(hours=1))
    assert api.get("/api/v1/sessions/a1").status_code == 200


def test_a_revoked_token_is_unauthenticated_from_the_next_request(django_user_model, alpha):
    services.create_session(session_id="a1", project=alpha)
    api = client_of(django_user_model, "ann", Role.MEMBER, alpha)
    assert api.post("/api/v1/sessions/a1/events", WRITES["/events"]).status_code == 201
    assert services.revoke_token(token=ApiToken.objects.get(user__username="ann")) is True
    assert_error(api.get("/api/v1/sessions/a1"), 401, "unauthenticated")
    assert_error(api.post("/api/v1/sessions/a1/events", WRITES["/events"]), 401, "unauthenticated")
    assert Event.objects.count() == 1


def test_a_token_records_when_it_was_last_used(django_user_model, alpha):
    api = client_of(django_user_model, "ann", Role.MEMBER, alpha)
    token = ApiToken.objects.get(user__username="ann")
    assert token.last_used_at is None
    before = timezone.now()
    assert api.get("/api/v1/sessions").status_code == 200
    token.refresh_from_db()
    assert token.last_used_at is not None and before <= token.last_used_at <= timezone.now()


def test_a_token_of_a_lowered_member_loses_the_rights_the_role_lost(django_user_model, alpha):
    services.create_session(session_id="a1", project=alpha)
    user = user_named(django_user_model, "ann")
    api = ApiClient(token_for(user, role=Role.MEMBER, project=alpha))
    assert api.post("/api/v1/sessions/a1/events", WRITES["/events"]).status_code == 201
    member(user, Role.VIEWER, alpha)
    assert_error(api.post("/api/v1/sessions/a1/events", WRITES["/events"]), 403, "forbidden")
    assert api.get("/api/v1/sessions/a1").status_code == 200
    services.set_membership(project=alpha, user=user, role=None)
    assert_error(api.get("/api/v1/sessions/a1"), 404, "not_found")


def test_a_site_token_gets_no_session(django_user_model, beta_session):
    root = django_user_model.objects.create_superuser("root")
    api = ApiClient(services.issue_token(user=root, project=None, scopes=[Scope.METRICS])[1])
    assert api.get("/api/v1/sessions").json()["items"] == []
    assert_error(api.get("/api/v1/sessions/b1"), 404, "not_found")
    assert_error(api.post("/api/v1/sessions", {"id": "x"}), 422, "project_required")


# The API's own description --------------------------------------------------------------


def test_the_openapi_document_lists_403_for_every_session_endpoint(client):
    paths = client.get("/api/v1/openapi.json").json()["paths"]
    session_paths = {path: ops for path, ops in paths.items() if path.startswith("/api/v1/sessions/{session_id}")}
    # /events and /notes serve a read and a write; a call's verdicts have three paths of their own (test_verdicts.py).
    call_paths = {f"/api/v1/sessions/{{session_id}}/calls/{{call_id}}/{action}" for action in ("verdict", "verdicts", "check")}
    assert call_paths <= session_paths.keys()
    assert len(session_paths) == len(READS) + len(WRITES) - 2 + len(call_paths)
    for path, operations in session_paths.items():
        for method, operation in operations.items():
            assert "403" in operation["responses"], f"{method.upper()} {path}"
