"""Who sees which pages (dashboard.pages.sessions through sessions_app.selectors.access), by Django's test client.

A session in a project the user is no member of does not exist for them: every
page of it answers 404 like an unknown id, and the list never shows it. Inside
a project, the role decides which controls a page offers and which posts it takes.
"""

from __future__ import annotations

import re

import pytest
from django.test import Client

from sessions_app import selectors, services
from sessions_app.log.events import validate_batch
from sessions_app.models import AuditEntry, Event, Role, Session
from tests.access import member
from tests.sessions_app.log.strategies import message
from tests.sessions_app.log.test_recovery import WORKED_EXAMPLE
from tests.sessions_app.services.test_forks import CRASHED
from tests.sessions_app.services.test_recovery import store

pytestmark = pytest.mark.django_db

SECRET = "the other team keeps this plan to itself"  # no character a page escapes


def text_of(response) -> str:
    return response.content.decode()


def logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def offered(page: str) -> set[str]:
    """The boundaries a page offers to fork at ("Fork here", "Fork whole session")."""
    return set(re.findall(r'class="button fork-(?:here|whole)" href="/sessions/[^/]+/fork\?boundary=(\d+|last)"', page))


@pytest.fixture
def theirs(team):
    """A stalled session of the team's, with a recovery to offer and boundaries to fork at."""
    session = services.create_session(session_id="theirs", agent_name="team-agent", project=team)
    items = [("user_message", message(SECRET)), *WORKED_EXAMPLE]
    services.append_events(session_id=session.id, events=validate_batch([{"type": t, "data": d} for t, d in items]))
    return Session.objects.get(pk=session.id)


@pytest.fixture
def outsider(django_user_model):
    """An operator of the default project (every right there), no member of the team's."""
    user = django_user_model.objects.create_user("outsider")
    member(user, Role.OPERATOR)
    return logged_in(user)


def digest_of(session: Session) -> str:
    return selectors.recovery_plan(session).digest(session.event_count)


# Another project's session: 404 everywhere


@pytest.mark.parametrize(
    "method, path, data",
    [
        ("get", "/sessions/{id}/", {}),
        ("get", "/sessions/{id}/", {"view": "raw"}),
        ("get", "/sessions/{id}/blocks", {"before": "5"}),
        ("get", "/sessions/{id}/events/0.json", {}),
        ("get", "/sessions/{id}/fork", {"boundary": "0"}),
        ("post", "/sessions/{id}/fork", {"boundary": "0", "id": "stolen"}),
        ("get", "/sessions/{id}/recovery", {}),
        ("post", "/sessions/{id}/recovery", {"digest": "DIGEST"}),
        ("post", "/sessions/{id}/recovery", {"digest": "DIGEST", "action": "patch"}),
        ("get", "/sessions/{id}/lineage", {}),
    ],
)
def test_every_page_of_another_projects_session_is_a_404_like_an_unknown_id(outsider, theirs, team, method, path, data):
    data = {key: digest_of(theirs) if value == "DIGEST" else value for key, value in data.items()}
    events_before = Event.objects.count()
    unknown = getattr(outsider, method)(path.format(id="no-such-session"), data)
    response = getattr(outsider, method)(path.format(id=theirs.id), data)
    assert (unknown.status_code, response.status_code) == (404, 404)
    assert SECRET not in text_of(response) and "team-agent" not in text_of(response)
    # Nothing forked, recovered or patched; the refusal is on the team's audit log.
    assert Session.objects.count() == 1 and Event.objects.count() == events_before
    denied = AuditEntry.objects.get(project=team, action=AuditEntry.ACCESS_DENIED)
    assert (denied.actor_name, denied.target) == ("outsider", theirs.id)


def test_the_list_and_its_search_never_show_another_projects_session(outsider, theirs):
    store([("user_message", message("ours"))], session_id="mine")
    for params in ({}, {"q": "theirs"}, {"q": "the"}, {"status": "stalled"}, {"project": "team"}):
        page = text_of(outsider.get("/", params))
        assert "/sessions/theirs/" not in page and "team-agent" not in page, params
    assert "/sessions/mine/" in text_of(outsider.get("/"))
    assert "/sessions/mine/" in text_of(outsider.get("/", {"q": "mi"}))


def test_a_member_of_the_team_sees_its_session(django_user_model, theirs, team):
    """The 404s above are the project's doing: the team's own viewer reads the same pages."""
    user = django_user_model.objects.create_user("teammate")
    member(user, Role.VIEWER, team)
    client = logged_in(user)
    assert SECRET in text_of(client.get("/sessions/theirs/"))
    assert client.get("/sessions/theirs/events/0.json").json()["data"]["content"] == SECRET
    assert client.get("/sessions/theirs/lineage").status_code == 200
    assert "/sessions/theirs/" in text_of(client.get("/", {"q": "theirs"}))


# Roles inside the project: what a page offers, what a post may do


@pytest.fixture
def viewer(django_user_model):
    user = django_user_model.objects.create_user("reader")
    member(user, Role.VIEWER)
    return logged_in(user)


@pytest.fixture
def member_client(django_user_model):
    user = django_user_model.objects.create_user("writer")
    member(user, Role.MEMBER)
    return logged_in(user)


@pytest.mark.parametrize("view", ["", "?view=raw"])
def test_a_viewer_is_offered_no_fork_and_a_member_is(viewer, member_client, view):
    store(CRASHED, session_id="crashed")  # fork spots at 0, 4 and 5; the whole session not now
    store(CRASHED[:6], session_id="clean")  # nothing open: the whole session may be forked
    for sid in ("crashed", "clean"):
        page = text_of(viewer.get(f"/sessions/{sid}/{view}"))
        assert offered(page) == set() and "Fork here" not in page and "Fork whole session" not in page
        assert "fork-unavailable" not in page and "/fork?boundary=" not in page
    assert offered(text_of(member_client.get(f"/sessions/crashed/{view}"))) == {"0", "4", "5"}
    assert "Fork whole session: not now" in text_of(member_client.get("/sessions/crashed/"))
    assert offered(text_of(member_client.get("/sessions/clean/"))) == {"0", "4", "5", "last"}


def test_a_viewer_may_not_fork_even_by_posting(viewer, member_client):
    store(CRASHED[:6], session_id="p")
    assert viewer.get("/sessions/p/fork", {"boundary": "4"}).status_code == 403
    assert viewer.post("/sessions/p/fork", {"boundary": "4", "id": "by-viewer"}).status_code == 403
    assert viewer.post("/sessions/p/fork", {"boundary": "4"}, HTTP_HX_REQUEST="true").status_code == 403
    assert not Session.objects.filter(parent_id="p").exists()
    # The same refusal repeated within a minute is recorded once (access.audit_denied).
    assert list(AuditEntry.objects.filter(action=AuditEntry.ACCESS_DENIED).values_list("actor_name", flat=True)) == ["reader"]
    response = member_client.post("/sessions/p/fork", {"boundary": "4", "id": "by-member"})
    assert response.status_code == 302 and Session.objects.get(parent_id="p").id == "by-member"


def test_a_viewer_reviews_a_recovery_but_has_no_confirm_and_a_post_is_refused(viewer, django_user_model):
    session = store(WORKED_EXAMPLE, session_id="crashed")
    page = text_of(viewer.get("/sessions/crashed/recovery"))
    assert "Outcome unknown: it may have run" in page  # the plan is there to review
    assert "Confirm recovery" not in page and "needs the operator role" in page
    for action in ("recover", "patch"):
        assert viewer.post("/sessions/crashed/recovery", {"digest": digest_of(session), "action": action}).status_code == 403
    assert Event.objects.count() == session.event_count
    operator = django_user_model.objects.create_user("op")
    member(operator, Role.OPERATOR)
    assert "Confirm recovery" in text_of(logged_in(operator).get("/sessions/crashed/recovery"))
