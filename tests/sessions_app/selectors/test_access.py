"""sessions_app.selectors.access, the one door: roles, token scopes, projects, and what a refusal leaves behind."""

import pytest
from django.contrib.auth.models import AnonymousUser
from django.db import transaction

from sessions_app import services
from sessions_app.lib.errors import SessionNotFound
from sessions_app.models import ApiToken, AuditEntry, Project, Role, Scope, Session
from sessions_app.selectors import access
from tests.access import member

pytestmark = pytest.mark.django_db

# Written out rather than read from access.ROLE_CAPABILITIES, so a change there shows up here.
EXPECTED_CAPABILITIES = {
    Role.VIEWER: {"read"},
    Role.MEMBER: {"read", "append", "fork"},
    Role.OPERATOR: {"read", "append", "fork", "recover"},
    Role.ADMIN: {"read", "append", "fork", "recover", "admin"},
}
EVERY_CAPABILITY = [access.READ, access.APPEND, access.FORK, access.RECOVER, access.ADMIN]


@pytest.fixture
def alpha():
    return Project.objects.create(slug="alpha", name="Alpha")


@pytest.fixture
def beta():
    return Project.objects.create(slug="beta", name="Beta")


@pytest.fixture
def person(django_user_model):
    return django_user_model.objects.create_user("person")


def token_actor(user, *, project, scopes) -> access.Actor:
    """The actor of a request that sends a new token with these scopes."""
    return actor_sending(services.issue_token(user=user, project=project, scopes=scopes)[1])


def actor_sending(secret: str) -> access.Actor:
    """The actor of a request that sent this token, read as the API reads it (a new request: roles read afresh)."""
    token = ApiToken.usable_for(secret)
    assert token is not None
    return access.Actor(user=token.user, token=token)


def denials():
    return list(AuditEntry.objects.filter(action=AuditEntry.ACCESS_DENIED).values_list("project__slug", "target", "detail"))


# Roles -------------------------------------------------------------------------


@pytest.mark.parametrize("role", list(EXPECTED_CAPABILITIES))
def test_each_role_grants_its_capabilities_in_its_project_and_nothing_elsewhere(person, alpha, beta, role):
    member(person, role, alpha)
    actor = access.Actor(user=person)
    assert set(actor.capabilities(alpha.pk)) == EXPECTED_CAPABILITIES[role]
    for capability in EVERY_CAPABILITY:
        assert actor.can(alpha.pk, capability) is (capability in EXPECTED_CAPABILITIES[role]), capability
        assert not actor.can(beta.pk, capability)
    assert actor.project_ids(access.READ) == [alpha.pk]
    assert list(access.projects(actor, access.APPEND)) == ([alpha] if role != Role.VIEWER else [])


def test_a_token_scope_set_per_role_leaves_out_admin(person):
    assert {role: set(access.role_scopes(role)) for role in EXPECTED_CAPABILITIES} == {
        Role.VIEWER: {"read"},
        Role.MEMBER: {"read", "append", "fork"},
        Role.OPERATOR: {"read", "append", "fork", "recover"},
        Role.ADMIN: {"read", "append", "fork", "recover"},
    }


def test_a_superuser_is_admin_of_every_project_without_membership(django_user_model, alpha, beta):
    root = django_user_model.objects.create_superuser("root")
    services.create_session(session_id="a1", project=alpha)
    services.create_session(session_id="b1", project=beta)
    actor = access.Actor(user=root)
    for project in (alpha, beta):
        assert set(actor.capabilities(project.pk)) == EXPECTED_CAPABILITIES[Role.ADMIN]
    assert set(access.visible_sessions(actor, access.RECOVER).values_list("id", flat=True)) == {"a1", "b1"}
    assert access.session_for(actor, "b1", access.RECOVER).id == "b1"


def test_an_inactive_user_may_do_nothing_whatever_their_role(django_user_model, person, alpha):
    member(person, Role.ADMIN, alpha)
    root = django_user_model.objects.create_superuser("root")
    services.create_session(session_id="a1", project=alpha)
    for user in (person, root):
        user.is_active = False
        user.save()
        actor = access.Actor(user=user)
        assert actor.roles() == {} and actor.capabilities(alpha.pk) == frozenset()
        assert not access.visible_sessions(actor).exists()
        with pytest.raises(SessionNotFound):
            access.session_for(actor, "a1")


def test_an_anonymous_actor_sees_nothing_and_its_refusals_are_not_audited(alpha):
    services.create_session(session_id="a1", project=alpha)
    actor = access.Actor(user=AnonymousUser())
    assert actor.name == "anonymous" and actor.project_ids() == []
    with pytest.raises(SessionNotFound):
        access.session_for(actor, "a1")
    assert denials() == []


def test_roles_are_read_once_per_actor(person, alpha, django_assert_num_queries):
    member(person, Role.MEMBER, alpha)
    actor = access.Actor(user=person)
    with django_assert_num_queries(1):
        for capability in EVERY_CAPABILITY:
            actor.can(alpha.pk, capability)


# Tokens ------------------------------------------------------------------------


def test_a_token_can_only_what_both_its_scopes_and_its_owners_role_allow(person, alpha):
    member(person, Role.OPERATOR, alpha)
    reader = token_actor(person, project=alpha, scopes=[Scope.READ])
    assert set(reader.capabilities(alpha.pk)) == {"read"}
    full = token_actor(person, project=alpha, scopes=access.role_scopes(Role.OPERATOR))
    assert set(full.capabilities(alpha.pk)) == {"read", "append", "fork", "recover"}  # never admin: no scope carries it


def test_a_member_cannot_be_issued_a_recover_scope(person, alpha):
    member(person, Role.MEMBER, alpha)
    with pytest.raises(services.InvalidScopes, match=r"person is a member of alpha.*\['recover'\]"):
        services.issue_token(user=person, project=alpha, scopes=[Scope.READ, Scope.RECOVER])
    with pytest.raises(services.InvalidScopes, match="not a member"):
        services.issue_token(user=person, project=Project.objects.create(slug="gamma", name="Gamma"), scopes=[Scope.READ])
    assert not person.api_tokens.exists()


def test_a_token_loses_what_its_owners_lowered_role_no_longer_allows(person, alpha):
    member(person, Role.OPERATOR, alpha)
    row, secret = services.issue_token(user=person, project=alpha, scopes=access.role_scopes(Role.OPERATOR))
    services.create_session(session_id="a1", project=alpha)

    member(person, Role.MEMBER, alpha)  # lowered after the token was issued
    actor = actor_sending(secret)
    assert set(actor.capabilities(alpha.pk)) == {"read", "append", "fork"}
    with pytest.raises(access.Forbidden) as refused:
        access.session_for(actor, "a1", access.RECOVER)
    assert refused.value.capability == access.RECOVER and "your role" in refused.value.detail

    services.set_membership(project=alpha, user=person, role=None)  # removed: the token sees nothing at all
    actor = actor_sending(secret)
    assert actor.capabilities(alpha.pk) == frozenset()
    with pytest.raises(SessionNotFound):
        access.session_for(actor, "a1")
    assert row.scopes == ["append", "fork", "read", "recover"]  # the row is untouched: the role bounds it on use


def test_a_token_acts_only_in_its_own_project_even_where_its_owner_is_a_member(person, alpha, beta):
    member(person, Role.OPERATOR, alpha)
    member(person, Role.OPERATOR, beta)
    services.create_session(session_id="a1", project=alpha)
    services.create_session(session_id="b1", project=beta)
    actor = token_actor(person, project=alpha, scopes=access.role_scopes(Role.OPERATOR))
    assert actor.capabilities(beta.pk) == frozenset() and actor.project_ids() == [alpha.pk]
    assert list(access.visible_sessions(actor).values_list("id", flat=True)) == ["a1"]
    with pytest.raises(SessionNotFound):
        access.session_for(actor, "b1")
    with pytest.raises(access.ProjectNotFound):
        access.project_for(actor, "beta", access.APPEND)
    # The same person logged in (no token) has both.
    assert set(access.Actor(user=person).project_ids()) == {alpha.pk, beta.pk}


def test_a_site_token_sees_no_session(django_user_model, alpha):
    root = django_user_model.objects.create_superuser("root")
    services.create_session(session_id="a1", project=alpha)
    actor = token_actor(root, project=None, scopes=[Scope.METRICS])
    assert actor.capabilities(alpha.pk) == frozenset() and actor.project_ids() == []
    assert not access.visible_sessions(actor).exists()
    with pytest.raises(SessionNotFound):
        access.session_for(actor, "a1")
    with pytest.raises(access.ProjectRequired):
        access.project_for(actor, None, access.APPEND)
    # Refused where it was asked for: the session's project.
    assert denials() == [("alpha", "a1", {"capability": "read", "token": actor.token.prefix})]


def test_only_a_superuser_may_hold_a_site_token(person):
    with pytest.raises(services.InvalidScopes, match="superuser"):
        services.issue_token(user=person, project=None, scopes=[Scope.METRICS])
    with pytest.raises(services.InvalidScopes, match=r"site-level token may only carry \['metrics'\]"):
        services.issue_token(user=person, project=None, scopes=[Scope.READ])


# session_for ---------------------------------------------------------------------


def test_another_projects_session_is_not_found_and_the_refusal_is_audited_there(person, alpha, beta):
    member(person, Role.ADMIN, alpha)
    services.create_session(session_id="b1", project=beta)
    with pytest.raises(SessionNotFound):
        access.session_for(access.Actor(user=person), "b1", access.READ)
    entry = AuditEntry.objects.get(action=AuditEntry.ACCESS_DENIED)
    assert (entry.project, entry.actor, entry.actor_name, entry.target, entry.detail) == (beta, person, "person", "b1", {"capability": "read"})


def test_an_id_that_exists_nowhere_is_not_found_and_not_audited(person, alpha):
    member(person, Role.ADMIN, alpha)
    with pytest.raises(SessionNotFound):
        access.session_for(access.Actor(user=person), "ghost", access.READ)
    assert denials() == []


def test_a_viewer_appending_is_forbidden_and_audited(person, alpha):
    member(person, Role.VIEWER, alpha)
    services.create_session(session_id="a1", project=alpha)
    actor = access.Actor(user=person)
    assert access.session_for(actor, "a1", access.READ).id == "a1"
    with pytest.raises(access.Forbidden) as refused:
        access.session_for(actor, "a1", access.APPEND)
    assert refused.value.capability == access.APPEND
    assert str(refused.value) == "your role may not create sessions and append events"
    assert denials() == [("alpha", "a1", {"capability": "append"})]


def test_a_token_without_the_scope_is_forbidden_and_the_refusal_names_the_scope_and_the_token(person, alpha):
    member(person, Role.OPERATOR, alpha)
    services.create_session(session_id="a1", project=alpha)
    actor = token_actor(person, project=alpha, scopes=[Scope.APPEND])
    assert access.session_for(actor, "a1", access.APPEND).id == "a1"
    with pytest.raises(access.Forbidden) as refused:
        access.session_for(actor, "a1", access.READ)
    assert refused.value.detail == "this token may not read sessions: it lacks the 'read' scope"
    assert denials() == [("alpha", "a1", {"capability": "read", "token": actor.token.prefix})]


@pytest.mark.parametrize(
    "role, allowed",
    [
        (Role.VIEWER, {"read"}),
        (Role.MEMBER, {"read", "append", "fork"}),
        (Role.OPERATOR, {"read", "append", "fork", "recover"}),
    ],
)
def test_session_for_answers_each_capability_as_the_role_says(person, alpha, role, allowed):
    member(person, role, alpha)
    services.create_session(session_id="a1", project=alpha)
    actor = access.Actor(user=person)
    for capability in [access.READ, access.APPEND, access.FORK, access.RECOVER]:
        if capability in allowed:
            assert access.session_for(actor, "a1", capability).id == "a1"
        else:
            with pytest.raises(access.Forbidden):
                access.session_for(actor, "a1", capability)
    assert sorted(d["capability"] for _, _, d in denials()) == sorted({"read", "append", "fork", "recover"} - allowed)


# project_for ---------------------------------------------------------------------


def test_a_token_creates_in_its_own_project_by_default(person, alpha, beta):
    member(person, Role.MEMBER, alpha)
    member(person, Role.MEMBER, beta)  # a second project: a login would have to name one
    actor = token_actor(person, project=alpha, scopes=[Scope.APPEND])
    assert access.project_for(actor, None, access.APPEND) == alpha
    assert access.project_for(actor, "alpha", access.APPEND) == alpha


def test_a_token_without_append_may_not_create_even_in_its_project(person, alpha):
    member(person, Role.MEMBER, alpha)
    actor = token_actor(person, project=alpha, scopes=[Scope.READ])
    with pytest.raises(access.Forbidden, match="lacks the 'append' scope"):
        access.project_for(actor, None, access.APPEND)
    assert denials() == [("alpha", "project alpha", {"capability": "append", "token": actor.token.prefix})]


def test_a_login_creates_in_the_one_project_where_it_may(person, alpha, beta):
    member(person, Role.MEMBER, alpha)
    member(person, Role.VIEWER, beta)  # may read there, not create
    assert access.project_for(access.Actor(user=person), None, access.APPEND) == alpha


def test_a_login_that_may_create_in_no_project_or_several_must_name_one(person, alpha, beta):
    actor = access.Actor(user=person)
    with pytest.raises(access.ProjectRequired, match="in none"):
        access.project_for(actor, None, access.APPEND)
    member(person, Role.MEMBER, alpha)
    member(person, Role.MEMBER, beta)
    with pytest.raises(access.ProjectRequired, match="more than one"):
        access.project_for(access.Actor(user=person), None, access.APPEND)
    assert access.project_for(access.Actor(user=person), "beta", access.APPEND) == beta


def test_an_unknown_or_unseen_project_is_not_found(person, alpha, beta):
    member(person, Role.MEMBER, alpha)
    actor = access.Actor(user=person)
    with pytest.raises(access.ProjectNotFound, match="'nowhere'"):
        access.project_for(actor, "nowhere", access.APPEND)
    with pytest.raises(access.ProjectNotFound, match="'beta'"):
        access.project_for(actor, "beta", access.APPEND)
    # Only the project that exists has an audit log to hold the refusal.
    assert denials() == [("beta", "project beta", {"capability": "append"})]


def test_a_viewer_naming_their_project_to_create_in_is_forbidden(person, alpha):
    member(person, Role.VIEWER, alpha)
    with pytest.raises(access.Forbidden, match="your role in project alpha may not create sessions"):
        access.project_for(access.Actor(user=person), "alpha", access.APPEND)
    assert denials() == [("alpha", "project alpha", {"capability": "append"})]


# actor_of ----------------------------------------------------------------------


def test_actor_of_keeps_one_actor_per_request_user(rf, person, alpha):
    member(person, Role.MEMBER, alpha)
    request = rf.get("/")
    request.user = person
    first = access.actor_of(request)
    assert access.actor_of(request) is first and first.token is None
    request.user = AnonymousUser()  # a different user (e.g. after logout) gets a new actor
    assert access.actor_of(request) is not first and access.actor_of(request).project_ids() == []


# The append lane's check, in the append's locked read -----------------------------


def test_locked_session_for_token_answers_as_usable_for_and_actor_can_for_every_kind_of_token(django_user_model, alpha, beta):
    from datetime import timedelta

    from django.utils import timezone

    now = timezone.now()
    services.create_session(session_id="in-alpha", project=alpha)
    services.create_session(session_id="in-beta", project=beta)
    secrets = []

    def issued(user, role, *, project=None, scopes=None, **changes):
        project = project or alpha
        if role is not None:
            member(user, role, project)
        row, secret = services.issue_token(user=user, project=project, scopes=scopes or access.role_scopes(role or Role.ADMIN))
        if changes:
            ApiToken.objects.filter(pk=row.pk).update(**changes)
        secrets.append(secret)

    people = [django_user_model.objects.create_user(f"p{i}") for i in range(12)]
    root = django_user_model.objects.create_superuser("root")
    issued(people[0], Role.MEMBER)
    issued(people[1], Role.MEMBER, scopes=["read"])
    issued(people[2], Role.VIEWER)
    issued(people[3], Role.OPERATOR, last_used_at=now)  # used just now: nothing to record
    issued(people[4], Role.ADMIN, last_used_at=now - timedelta(minutes=5))
    issued(people[5], Role.MEMBER, revoked_at=now)
    issued(people[6], Role.MEMBER, expires_at=now - timedelta(seconds=1))
    issued(people[7], Role.MEMBER, expires_at=now + timedelta(days=1))
    issued(people[8], Role.MEMBER, project=beta)
    issued(people[9], Role.OPERATOR)
    services.set_membership(project=alpha, user=people[9], role=Role.VIEWER)  # lowered after the token was issued
    issued(people[10], Role.MEMBER)
    people[10].is_active = False
    people[10].save()
    issued(root, None)  # a superuser, no membership
    secrets.append(services.issue_token(user=root, project=None, scopes=["metrics"])[1])
    secrets.append("tl_no_such_token")

    checked = 0
    for secret in secrets:
        row = ApiToken.usable_for(secret)
        for session_id in ("in-alpha", "in-beta", "nowhere"):
            for capability in EVERY_CAPABILITY:
                with transaction.atomic():
                    granted = access.locked_session_for_token(secret, session_id, capability)
                session = Session.objects.filter(pk=session_id).first()
                expected = (
                    row is not None and session is not None and access.Actor(user=row.user, token=row).can(session.project_id, capability)
                )
                assert (granted is not None) == expected, (secret, session_id, capability)
                if granted is None:
                    continue
                locked, token = granted
                assert [getattr(locked, f.attname) for f in Session._meta.concrete_fields] == [
                    getattr(session, f.attname) for f in Session._meta.concrete_fields
                ]
                assert (token.pk, token.project_id, sorted(token.scopes)) == (row.pk, row.project_id, sorted(row.scopes))
                recent = row.last_used_at is not None and (now - row.last_used_at).total_seconds() <= ApiToken.LAST_USED_RESOLUTION_SECONDS
                assert (token.last_used_at is not None) == recent
                checked += 1
    assert checked > 10  # the matrix holds grants as well as refusals


# Repeated refusals -----------------------------------------------------------------


def test_a_refusal_repeated_within_a_minute_is_recorded_once_per_actor_target_and_capability(person, alpha, beta, django_user_model, monkeypatch):
    member(person, Role.VIEWER, alpha)
    other = django_user_model.objects.create_user("other")
    member(other, Role.VIEWER, alpha)
    services.create_session(session_id="b1", project=beta)
    services.create_session(session_id="b2", project=beta)
    services.create_session(session_id="a1", project=alpha)

    def refuse(actor, session_id, capability=access.READ):
        with pytest.raises((SessionNotFound, access.Forbidden)):
            access.session_for(actor, session_id, capability)

    for _ in range(50):
        refuse(access.Actor(user=person), "b1")
    assert denials() == [("beta", "b1", {"capability": "read"})]
    refuse(access.Actor(user=person), "b2")  # another target
    refuse(access.Actor(user=other), "b1")  # another actor
    refuse(access.Actor(user=person), "a1", access.FORK)  # another refusal
    refuse(access.Actor(user=person), "a1", access.FORK)
    token = actor_sending(services.issue_token(user=person, project=alpha, scopes=[Scope.READ])[1])
    refuse(token, "b1")  # the same user with a token is another actor
    refuse(token, "b1")
    assert len(denials()) == 5
    monkeypatch.setattr(access, "DENIAL_RECORD_SECONDS", 0)  # the minute has passed
    refuse(access.Actor(user=person), "b1")
    assert len(denials()) == 6


def test_a_refused_project_is_recorded_once_a_minute(person, alpha):
    member(person, Role.VIEWER, alpha)
    for _ in range(5):
        with pytest.raises(access.Forbidden):
            access.project_for(access.Actor(user=person), "alpha", access.APPEND)
    assert denials() == [("alpha", "project alpha", {"capability": "append"})]


def test_probing_another_projects_session_through_pages_and_the_api_adds_one_row_a_minute(person, alpha, beta):
    from django.test import Client

    from tests.conftest import ApiClient

    member(person, Role.ADMIN, alpha)
    services.create_session(session_id="b1", project=beta)
    browser = Client()
    browser.force_login(person)
    api = ApiClient(services.issue_token(user=person, project=alpha, scopes=[Scope.READ])[1])
    for _ in range(20):
        assert browser.get("/sessions/b1/").status_code == 404
        assert api.get("/api/v1/sessions/b1").status_code == 404
    assert sorted(detail.get("token", "") for _, _, detail in denials()) == ["", api.headers["Authorization"][7:17]]


# The checks of open streams' credentials (dashboard.live.credentials asks them before each frame) ------------


def test_usable_token_ids_follows_the_rule_of_usable_tokens_at_every_count(django_user_model):
    """Compiled statements with the rule applied in Python: the same answer as ApiToken.objects.usable()."""
    from datetime import timedelta

    from django.utils import timezone

    from tests.access import token_for

    owner, leaver = django_user_model.objects.create_user("owner"), django_user_model.objects.create_user("leaver")
    secrets = [token_for(owner) for _ in range(6)] + [token_for(leaver)]
    ids = [ApiToken.usable_for(secret).pk for secret in secrets]
    services.revoke_token(token=ApiToken.objects.get(pk=ids[1]))
    ApiToken.objects.filter(pk=ids[2]).update(expires_at=timezone.now() - timedelta(seconds=1))
    ApiToken.objects.filter(pk=ids[3]).update(expires_at=timezone.now() + timedelta(hours=1))
    leaver.is_active = False
    leaver.save()
    for count in range(1, len(ids) + 1):  # the IN lists of 1, 2, 4 and 8 places
        asked = set(ids[:count]) | {10**9}  # and one that does not exist
        assert access.usable_token_ids(asked) == set(ApiToken.objects.usable().filter(pk__in=asked).values_list("pk", flat=True))
    assert access.usable_token_ids(set(ids)) == {ids[0], ids[3], ids[4], ids[5]}


def test_ended_logins_are_those_django_would_no_longer_log_in(django_user_model, settings):
    from importlib import import_module

    from django.contrib.auth import get_user
    from django.test import Client, RequestFactory

    people = [django_user_model.objects.create_user(f"p{n}", password="old-horse-battery") for n in range(3)]
    clients = []
    for person in people * 2:
        client = Client()
        client.force_login(person)
        clients.append(client)
    logins = {(client.cookies[settings.SESSION_COOKIE_NAME].value, person.pk) for client, person in zip(clients, people * 2)}
    assert access.ended_logins(logins) == set()
    clients[0].post("/logout/")
    people[1].set_password("a-new-horse-battery")
    people[1].save()
    people[2].is_active = False
    people[2].save()

    def django_logs_in(key: str) -> bool:
        request = RequestFactory().get("/")
        request.session = import_module(settings.SESSION_ENGINE).SessionStore(key)
        return get_user(request).is_authenticated

    expected = {(key, pk) for key, pk in logins if not django_logs_in(key)}
    assert len(expected) == 5, "the logout, and both logins of the new password's user and of the deactivated one"
    assert access.ended_logins(logins) == expected
    ((kept_key, _),) = logins - expected
    assert access.ended_logins({(kept_key, people[1].pk)}) == {(kept_key, people[1].pk)}, "a login is its own user's"
