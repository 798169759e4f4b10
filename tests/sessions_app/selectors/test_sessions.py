"""sessions_app/selectors/sessions.py: sessions_by_status, the metrics' grouped count, says what Session.status says of each session."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import pytest
from django.utils import timezone

from sessions_app import selectors, services
from sessions_app.log.events import validate_batch
from sessions_app.models import Project, Session
from tests.sessions_app import factories as f

pytestmark = pytest.mark.django_db


def test_one_grouped_query_agrees_with_each_sessions_status(django_user_model, django_assert_num_queries):
    other = Project.objects.create(slug="other", name="Other")
    old = timezone.now() - timedelta(hours=1)
    turn = [f.event("turn_start", turn=1), f.user("hi")]
    for session_id, events, received_at, project in [
        ("running", turn, None, None),
        ("stalled", turn, old, None),
        ("active", [f.user("hi")], None, other),
        ("clean", [f.user("hi")], old, other),
        ("recovered", turn, old, None),
        ("empty", [], None, None),
    ]:
        services.create_session(session_id=session_id, project=project)
        if events:
            services.append_events(session_id=session_id, events=validate_batch(events), received_at=received_at)
    services.recover(session_id="recovered", user=django_user_model.objects.create_user("ops"))

    with django_assert_num_queries(1):
        counted = selectors.sessions_by_status()
    expected = Counter((s.project.slug, s.status) for s in Session.objects.select_related("project"))
    assert counted == sorted((slug, status, n) for (slug, status), n in expected.items())
    assert {status for _, status, _ in counted} == set(selectors.STATUSES)
