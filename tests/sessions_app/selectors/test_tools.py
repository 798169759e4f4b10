"""selectors.tools.project_tools: the counts follow the calls' states as every view reads them."""

import pytest
from django.contrib.auth import get_user_model

from sessions_app import services
from sessions_app.log.events import validate_batch
from sessions_app.models import Project, ToolPolicy
from sessions_app.selectors.tools import project_tools, reconciler_host
from tests.sessions_app.log.strategies import message
from tests.sessions_app.services.test_recovery import store

pytestmark = pytest.mark.django_db

CRASH = [
    ("user_message", message("pay")),
    ("turn_start", {"turn": 1}),
    ("assistant_message", message("", tool_calls=[{"id": "p1", "name": "charge_card"}, {"id": "p2", "name": "charge_card"}])),
    ("tool_call", {"id": "p1", "name": "charge_card"}),
    ("tool_result", message("ok", tool_call_id="p2", name="charge_card")),
]


def test_unknown_outcomes_are_counted_before_and_after_recovery_and_a_class_follows_the_policy():
    session = store(CRASH, session_id="crash")  # quiet since January: stalled
    ToolPolicy.objects.create(pattern="charge_*", side_effect="external_effect", check_url="https://93.184.216.34/x")
    [tool] = project_tools(Project.default()).tools
    assert (tool.name, tool.calls, tool.unknown_calls, tool.side_effect, tool.no_policy) == ("charge_card", 2, 1, "external_effect", False)
    services.recover(session_id=session.id, user=get_user_model().objects.create_user("ops"))
    [tool] = project_tools(Project.default()).tools
    assert (tool.calls, tool.unknown_calls) == (2, 1)  # the synthetic result keeps the risk
    ToolPolicy.objects.all().delete()
    [tool] = project_tools(Project.default()).tools
    assert (tool.side_effect, tool.no_policy) == ("unknown", True)


def test_a_running_sessions_owed_call_is_pending_not_unknown():
    services.create_session(session_id="live")
    services.append_events(session_id="live", events=validate_batch([{"type": t, "data": d} for t, d in CRASH]))
    [tool] = project_tools(Project.default()).tools
    assert (tool.calls, tool.unknown_calls) == (2, 0)


def test_the_reconciler_is_shown_by_its_host():
    assert reconciler_host("https://recon.example.com:8443/check?x=1") == "recon.example.com" and reconciler_host("") == ""
