"""dashboard.pages.checks and the call card's reconciler part (templates/sessions/_call_checks.html): every attempt on
the card, "Check now" for those who may recover."""

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from sessions_app.models import CallCheck, CheckAttempt, Role
from sessions_app.services import reconcilers
from tests.access import member
from tests.reconciler_endpoint import check_policy
from tests.sessions_app.services.notify.crashes import crashed, stalled_clock

pytestmark = pytest.mark.django_db


def login(django_user_model, name: str, role: str) -> Client:
    user = django_user_model.objects.create_user(name)
    member(user, role)
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def people(django_user_model, db):
    check_policy("https://reconciler.example.org/check", "whsec_" + "A" * 43)
    session = crashed("crash-1")
    reconcilers.schedule_checks(now=stalled_clock(session))
    at = timezone.now() - timedelta(minutes=2)
    CheckAttempt.objects.create(session=session, call_id="c3", pattern="tool_c3", at=at, status=503, error="HTTP 503 <b>busy</b>")
    CheckAttempt.objects.create(session=session, call_id="c3", pattern="tool_c3", at=at, status=None, error="timed out after 10 s")
    return {role: login(django_user_model, role, role) for role in (Role.VIEWER, Role.OPERATOR)}


def card(client, call_id: str) -> str:
    html = client.get("/sessions/crash-1/").content.decode()
    start = html.index(f'data-call-id="{call_id}"')
    following = html.find('class="card ', start)
    return html[start : following if following != -1 else None]


def test_every_attempt_shows_on_the_calls_card_escaped(people):
    c3 = card(people[Role.VIEWER], "c3")
    assert "reconciler:tool_c3" in c3 and "HTTP 503 &lt;b&gt;busy&lt;/b&gt;" in c3 and "timed out after 10 s" in c3
    assert "<td>503</td>" in c3 and "Check now" not in c3  # viewers may not recover
    assert "Check now" in card(people[Role.OPERATOR], "c3")
    assert "Reconciler" not in card(people[Role.OPERATOR], "c1")  # no endpoint for tool_c1


def test_check_now_queues_the_check_for_operators_only(people):
    CallCheck.objects.update(state=CallCheck.GAVE_UP, attempts=8)
    assert people[Role.VIEWER].post("/sessions/crash-1/calls/c3/check").status_code == 403
    assert CallCheck.objects.get().state == CallCheck.GAVE_UP
    response = people[Role.OPERATOR].post("/sessions/crash-1/calls/c3/check", headers={"HX-Request": "true"})
    assert response.status_code == 204
    assert CallCheck.objects.get().state == CallCheck.PENDING
    response = people[Role.OPERATOR].post("/sessions/crash-1/calls/c3/check")
    assert response.status_code == 302 and response.url.startswith("/sessions/crash-1/#")
    assert people[Role.OPERATOR].post("/sessions/crash-1/calls/c1/check").status_code == 409
    assert people[Role.OPERATOR].post("/sessions/crash-1/calls/nope/check").status_code == 404
