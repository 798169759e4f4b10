"""GET /api/v1/calls (api.md, "Calls, notes and search"): the calls to check across the caller's projects."""

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from sessions_app import services
from sessions_app.models import LedgerCall, Project, Role, Session, ToolPolicy
from tests.access import token_for
from tests.conftest import ApiClient
from tests.sessions_app.api.http import assert_error
from tests.sessions_app.api.test_calls import CRASH, ev, quiet, store
from tests.sessions_app.log.strategies import message

pytestmark = pytest.mark.django_db


@pytest.fixture
def policies(db):
    ToolPolicy.objects.create(pattern="lookup", side_effect="read_only")
    ToolPolicy.objects.create(pattern="charge_*", side_effect="external_effect")


def fleet(client, query: str = "") -> dict:
    response = client.get(f"/api/v1/calls{query}")
    assert response.status_code == 200, response.content
    return response.json()


def listed(client, query: str = "") -> list[tuple]:
    return [(c["session_id"], c["call_id"], c["state"]) for c in fleet(client, query)["items"]]


def sighted_long_ago(session_id: str) -> None:
    LedgerCall.objects.filter(session_id=session_id).update(sighted_at=timezone.now() - timedelta(hours=1))


def test_by_default_unknown_outcomes_superseded_calls_and_pending_past_the_stall_window(api, policies):
    store(api, "crashed", CRASH, agent_name="billing-bot")
    store(api, "running", CRASH, agent_name="billing-bot")
    store(api, "slow", CRASH, agent_name="billing-bot")
    assert listed(api) == []  # all three running, their calls sighted a moment ago
    quiet("crashed")
    sighted_long_ago("crashed")
    sighted_long_ago("slow")  # still running (activity now), its call pending for an hour
    Session.objects.filter(pk="slow").update(last_activity_at=timezone.now())
    assert listed(api) == [("slow", "p1", "pending"), ("crashed", "p1", "tool_outcome_unknown")]
    [call] = fleet(api, "?state=tool_outcome_unknown")["items"]
    assert call | {"time": None} == {
        "session_id": "crashed", "project": "default", "agent_name": "billing-bot", "call_id": "p1",
        "name": "charge_card", "arguments": {"cents": 500}, "class": "external_effect", "state": "tool_outcome_unknown",
        "seq": 4, "result_seq": None, "turn_seq": 1, "time": None, "notes": [], "idempotency_key": None, "receipt": None, "verdict": None,
    }  # fmt: skip


def test_a_late_real_result_after_recovery_reads_superseded_and_stays_listed(api, policies, django_user_model):
    store(api, "s", CRASH)
    services.recover(session_id="s", user=django_user_model.objects.create_user("ops"))
    assert listed(api) == [("s", "p1", "tool_outcome_unknown")]  # the synthetic result's risk
    api.post("/api/v1/sessions/s/events", {"events": [ev("tool_result", message("charged", tool_call_id="p1"))]})
    [call] = fleet(api)["items"]
    assert (call["state"], call["result_seq"]) == ("superseded", 8)


def test_state_and_class_repeat_and_the_class_follows_the_policies_as_they_are_now(api, policies):
    store(api, "s", CRASH)
    quiet("s")
    both = "?state=completed&state=tool_outcome_unknown"
    assert listed(api, both) == [("s", "p1", "tool_outcome_unknown"), ("s", "q1", "completed")]
    assert listed(api, both + "&class=read_only") == [("s", "q1", "completed")]
    assert listed(api, both + "&class=read_only&class=external_effect") == listed(api, both)
    ToolPolicy.objects.filter(pattern="charge_*").update(side_effect="idempotent")
    assert listed(api, both + "&class=idempotent") == [("s", "p1", "tool_outcome_unknown")]
    assert fleet(api, both + "&class=idempotent")["items"][0]["class"] == "idempotent"
    ToolPolicy.objects.all().delete()
    assert listed(api, both + "&class=unknown") == listed(api, both)


def test_agent_tool_tag_and_time_filters(api, policies):
    store(api, "a", CRASH, agent_name="billing-bot")
    store(api, "b", CRASH, agent_name="other-bot")
    every = "?state=completed&state=pending"
    assert {s for s, _, _ in listed(api, every + "&agent=billing-bot")} == {"a"}
    assert listed(api, every + "&tool=lookup") == [("b", "q1", "completed"), ("a", "q1", "completed")]
    assert api.post("/api/v1/sessions/b/notes", {"text": "billing says charged", "tags": ["refund-confirmed"], "seq": 4}).status_code == 201
    assert listed(api, every + "&tag=refund-confirmed") == [("b", "p1", "pending")]
    assert fleet(api, every + "&tag=refund-confirmed")["items"][0]["notes"][0]["text"] == "billing says charged"
    assert listed(api, every + "&tag=nothing") == []
    LedgerCall.objects.filter(session_id="a").update(sighted_at=timezone.now() - timedelta(days=2))
    since = (timezone.now() - timedelta(days=1)).isoformat()
    assert {s for s, _, _ in listed(api, every + "&since=" + since.replace("+", "%2B"))} == {"b"}
    assert {s for s, _, _ in listed(api, every + "&until=" + since.replace("+", "%2B"))} == {"a"}


def test_the_cursor_pages_newest_first_without_repeats(api):
    for i in range(5):
        store(api, f"s{i}", [ev("assistant_message", message("", tool_calls=[{"id": "c", "name": "send"}]))])
    seen, cursor = [], ""
    while True:
        page = fleet(api, "?state=pending&limit=2" + (f"&cursor={cursor}" if cursor else ""))
        seen += [c["session_id"] for c in page["items"]]
        if not (cursor := page["next_cursor"]):
            break
    assert seen == ["s4", "s3", "s2", "s1", "s0"]


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("?state=maybe", "state"), ("?class=dangerous", "class"), ("?since=yesterday", "since"),
        ("?until=2026-01-01T00:00:00", "until"), ("?limit=0", "limit"), ("?limit=500", "limit"),
        ("?cursor=bogus", "cursor"), ("?agent=a%00b", "agent"), ("?tag=%00", "tag"),
    ],
)  # fmt: skip
def test_a_bad_filter_is_422_with_its_field_and_reason(api, query, field):
    response = api.get("/api/v1/calls" + query)
    assert_error(response, 422)
    assert field in response.content.decode()


def test_another_projects_calls_never_show(api, django_user_model):
    other = Project.objects.create(slug="other", name="Other")
    outsider = ApiClient(token_for(django_user_model.objects.create_user("outsider"), project=other))
    store(outsider, "theirs", CRASH)
    quiet("theirs")
    store(api, "ours", CRASH)
    quiet("ours")
    assert listed(api) == [("ours", "p1", "tool_outcome_unknown")]
    assert listed(api, "?project=other") == []
    assert listed(outsider) == [("theirs", "p1", "tool_outcome_unknown")]
    viewer = ApiClient(token_for(get_user_model().objects.create_user("viewer"), role=Role.VIEWER, scopes=["read"]))
    assert listed(viewer) == [("ours", "p1", "tool_outcome_unknown")]
