"""The recovery page with a verdict (session-log.md 8.2): the strategy it settles, and the events it changes."""

import pytest
from django.utils.html import escape

from sessions_app.models import ToolPolicy
from sessions_app.selectors import access
from sessions_app.services import verdicts as verdict_services
from tests.dashboard.pages.test_sessions import staff, text_of  # noqa: F401  (a fixture)
from tests.sessions_app.log.test_recovery import WORKED_EXAMPLE
from tests.sessions_app.services.test_recovery import store

pytestmark = pytest.mark.django_db


def test_a_happened_verdict_makes_the_call_an_effect_never_to_repeat_and_says_who_found_it(staff, django_user_model):  # noqa: F811
    ToolPolicy.objects.create(pattern="ech*", side_effect="external_effect")
    store(WORKED_EXAMPLE, session_id="crashed")
    vera = django_user_model.objects.get(username="ops")
    verdict_services.record_verdict(
        actor=access.Actor(user=vera), session_id="crashed", call_id="c3", outcome="happened", evidence="<b>portal</b> shows it"
    )
    page = text_of(staff.get("/sessions/crashed/recovery"))
    assert "resume_after_effects" in page and "seq None" not in page
    assert "verified by ops: " + escape("<b>portal</b> shows it") in page and "<b>portal</b>" not in page
    assert escape("It was verified as having happened by ops") in page  # the text the plan appends


def test_confirming_a_plan_previewed_before_a_verdict_appends_nothing_and_says_why(staff):  # noqa: F811
    from sessions_app.models import Event
    from tests.dashboard.live.test_recovery import banner, shown_plan

    store(WORKED_EXAMPLE, session_id="crashed")
    shown = shown_plan(text_of(staff.get("/sessions/crashed/recovery")))
    verdict_services.record_reconciler_verdict(session_id="crashed", call_id="c3", pattern="ech*", outcome="happened", evidence="found")
    response = staff.post("/sessions/crashed/recovery", {**shown, "note": "kept"})
    assert response.status_code == 409 and Event.objects.count() == 10
    assert banner(text_of(response)) == "Nothing was appended: a call's verdict was recorded or withdrawn since you opened the preview."
