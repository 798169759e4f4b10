"""sessions_app.selectors.reconcilers: a policy's attempts (for its page) and a page of cards' checks in three reads."""

from __future__ import annotations

import pytest
from django.utils import timezone

from sessions_app import selectors
from sessions_app.models import CallCheck, CheckAttempt, Project
from sessions_app.services import reconcilers
from tests.reconciler_endpoint import check_policy
from tests.sessions_app.services.notify.crashes import crashed, stalled_clock

SECRET = "whsec_" + "A" * 43


@pytest.mark.django_db
def test_a_policys_attempts_are_those_of_its_own_checks_newest_first(django_assert_num_queries):
    other = Project.objects.create(slug="other", name="Other")
    site = check_policy("https://a.example.org/", SECRET)
    own = check_policy("https://b.example.org/", SECRET, project=other)  # same pattern, the other project's own
    here, there = crashed("here"), crashed("there", project=other)
    reconcilers.schedule_checks(now=stalled_clock(there))
    assert dict(CallCheck.objects.values_list("session_id", "policy_id")) == {"here": site.pk, "there": own.pk}
    now = timezone.now()
    for session, error in [(here, "first"), (there, "elsewhere"), (here, "second")]:
        CheckAttempt.objects.create(session=session, call_id="c3", pattern="tool_c3", at=now, status=500, error=error)
    with django_assert_num_queries(1):
        assert [a.error for a in selectors.policy_attempts(site)] == ["second", "first"]
    assert [(a.session.pk, a.error) for a in selectors.policy_attempts(own)] == [("there", "elsewhere")]


@pytest.mark.django_db
def test_a_cards_checks_name_the_endpoint_and_list_the_attempts(django_assert_num_queries):
    check_policy("https://a.example.org/", SECRET)
    session = crashed("here")
    CheckAttempt.objects.create(session=session, call_id="c3", pattern="tool_c3", status=None, error="timed out")
    with django_assert_num_queries(3):
        checks = selectors.session_checks(session, ["c1", "c2", "c3"])
    c3 = checks.for_call("c3", "tool_c3")
    assert c3.can_check and c3.policy.pattern == "tool_c3" and c3.state is None and [a.error for a in c3.attempts] == ["timed out"]
    assert checks.for_call("c1", "tool_c1") is None  # no endpoint, no check, no attempt: nothing to show
