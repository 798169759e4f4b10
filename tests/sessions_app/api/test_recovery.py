"""api.md, section Recovery: the plan and its confirmation over HTTP."""

import pytest

from sessions_app.log import recovery, strategy
from sessions_app.log.events import event_to_wire
from sessions_app.models import AuditEntry, Event, RecoveryRecord, Role, ToolPolicy
from tests.access import token_for
from tests.conftest import ApiClient
from tests.sessions_app.log.strategies import events_of, message
from tests.sessions_app.log.test_recovery import NOT_STARTED, OUTCOME_UNKNOWN, WORKED_EXAMPLE, assistant, dispatch, result

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff(django_user_model):
    """An operator of the default project: the role that may apply recoveries."""
    return ApiClient(token_for(django_user_model.objects.create_user("ops", is_staff=True), role=Role.OPERATOR))


def store(api, session_id, items):
    assert api.post("/api/v1/sessions", {"id": session_id}).status_code == 201
    wire = [{"type": t, "data": d} for t, d in items]
    if wire:
        assert api.post(f"/api/v1/sessions/{session_id}/events", {"events": wire}).status_code == 201


def test_the_worked_example_plan_is_exactly_the_spec(api):
    store(api, "crashed", WORKED_EXAMPLE)
    body = api.get("/api/v1/sessions/crashed/recovery-plan").json()
    assert body["interrupted"] is True and body["open_turns"] == [1] and body["next_seq"] == 10
    assert body["repairs"] == [
        {"type": "tool_result", "data": {"tool_call_id": "c2", "name": "echo", "content": NOT_STARTED, "metadata": {"synthetic": True, "risk": "tool_not_started"}}},
        {"type": "tool_result", "data": {"tool_call_id": "c3", "name": "echo", "content": OUTCOME_UNKNOWN, "metadata": {"synthetic": True, "risk": "tool_outcome_unknown"}}},
        {"type": "turn_end", "data": {"reason": "interrupted", "steps": 2, "turn": 1}},
    ]
    assert body["warnings"] == []
    assert [(c["id"], c["rule"], c["evidence"], c["side_effect"]) for c in body["owed_calls"]] == [
        ("c2", 2, [4, 9], "unknown"),
        ("c3", 1, [9], "unknown"),
    ]


def test_without_tool_call_events_rules_3_and_4_decide(api):
    store(api, "crashed", [item for item in WORKED_EXAMPLE if item[0] != "tool_call"])
    body = api.get("/api/v1/sessions/crashed/recovery-plan").json()
    assert [(c["id"], c["rule"], c["risk"]) for c in body["owed_calls"]] == [
        ("c2", 3, "tool_not_started"),
        ("c3", 4, "tool_outcome_unknown"),
    ]


CONFORMANCE = {
    "zero-step turn": [("turn_start", {"turn": 3})],
    "turn without a number": [("turn_start", {}), assistant("a")],
    "call outside turns": [assistant("early"), ("turn_start", {"turn": 1})],
    "clean log with dangling calls": [("turn_start", {"turn": 1}), assistant("c1"), ("turn_end", {"turn": 1, "steps": 0, "reason": "complete"}), assistant("c2")],
    "double-started turns": [("turn_start", {"turn": 1}), assistant("a"), ("turn_start", {"turn": 2}), ("step_start", {}), assistant("b")],
    "stray turn_end": [("turn_end", {"reason": "complete"}), ("turn_start", {"turn": 1})],
    "stringified values": [("turn_start", {"turn": 1}), ("turn_end", {"turn": 1, "steps": 0, "reason": "interrupted"}), ("turn_start", {"turn": 2}), ("tool_result", message("x", tool_call_id="z", metadata={"synthetic": True, "risk": "tool_outcome_unknown"}))],
    "rule 1 despite a closed step": [("turn_start", {"turn": 1}), ("step_start", {}), assistant("a"), dispatch("a"), ("step_end", {"outcome": "ok"})],
    "result answering by id": [("turn_start", {"turn": 1}), assistant("a"), ("tool_result", {"id": "a", "content": "ok"})],
    "integer call ids": [("turn_start", {}), ("assistant_message", {"tool_calls": [{"id": 7}, {"id": True}]}), result("7")],
}


@pytest.mark.parametrize("items", CONFORMANCE.values(), ids=CONFORMANCE.keys())
def test_the_api_plan_equals_the_spec_plan(api, items):
    store(api, "s", items)
    expected = recovery.plan(events_of(items))
    body = api.get("/api/v1/sessions/s/recovery-plan").json()
    assert body["repairs"] == [{"type": r.type, "data": r.data} for r in expected.repairs]
    assert (body["open_turns"], body["warnings"], body["digest"]) == (expected.open_turns, expected.warnings, expected.digest(len(items)))
    # Strategies read off the stored tail equal those of the whole log (no policies: every tool unknown).
    assert body["strategies"] == [t.as_wire() for t in strategy.strategies(expected, lambda name: "unknown")]


def test_recover_with_the_previewed_digest_appends_the_plan_and_records_it(staff):
    store(staff, "crashed", WORKED_EXAMPLE)
    plan = staff.get("/api/v1/sessions/crashed/recovery-plan").json()
    response = staff.post("/api/v1/sessions/crashed/recover", {"digest": plan["digest"], "note": "checked the card processor"})
    assert response.status_code == 200, response.content
    body = response.json()
    assert [{"type": e["type"], "data": e["data"]} for e in body["appended"]] == plan["repairs"]
    assert [e["seq"] for e in body["appended"]] == [10, 11, 12] and body["next_seq"] == 13
    stored = [event_to_wire(e.to_log_event()) for e in Event.objects.filter(seq__gte=10).order_by("seq")]
    assert stored == body["appended"]
    record = RecoveryRecord.objects.get()
    assert (record.username, record.note, record.digest) == ("ops", "checked the card processor", plan["digest"])
    assert staff.get("/api/v1/sessions/crashed").json()["interrupted"] is False


def test_recovering_a_clean_session_appends_nothing(staff):
    store(staff, "fine", [("user_message", message("hi"))])
    response = staff.post("/api/v1/sessions/fine/recover", {})
    assert response.status_code == 200 and response.json() == {"appended": [], "next_seq": 1}
    assert not RecoveryRecord.objects.exists()


def test_a_stale_digest_is_409_with_the_fresh_plan_and_stores_nothing(staff):
    store(staff, "crashed", WORKED_EXAMPLE)
    digest = staff.get("/api/v1/sessions/crashed/recovery-plan").json()["digest"]
    staff.post("/api/v1/sessions/crashed/events", {"events": [{"type": "tool_result", "data": {"tool_call_id": "c3", "content": "came back"}}]})
    response = staff.post("/api/v1/sessions/crashed/recover", {"digest": digest})
    assert response.status_code == 409 and response.json()["error"] == "stale_plan"
    fresh = response.json()["plan"]
    assert fresh["next_seq"] == 11 and fresh["digest"] != digest
    assert [r["data"].get("tool_call_id") for r in fresh["repairs"]] == ["c2", None]
    assert Event.objects.count() == 11 and not RecoveryRecord.objects.exists()


def test_recover_needs_the_operator_role_checked_first(api):
    # `api` is a member: it reads the session, so a stale digest would be a 409 if the role were not checked first.
    store(api, "crashed", WORKED_EXAMPLE)
    for path in ["/api/v1/sessions/crashed/recover", "/api/v1/sessions/crashed/patch-dangling-calls"]:
        response = api.post(path, {"digest": "whatever"})
        assert response.status_code == 403 and response.json()["error"] == "forbidden", path
    assert Event.objects.count() == 10 and not RecoveryRecord.objects.exists()


def test_recovering_a_session_that_exists_nowhere_is_404_for_a_member_too(api):
    # No project, so no role to check: an unknown id is not_found for everyone.
    response = api.post("/api/v1/sessions/ghost/recover", {"digest": "whatever"})
    assert response.status_code == 404 and response.json()["error"] == "not_found"


def test_recover_of_an_unknown_session_is_404(staff):
    assert staff.post("/api/v1/sessions/ghost/recover", {}).status_code == 404
    assert staff.get("/api/v1/sessions/ghost/recovery-plan").status_code == 404


def test_side_effect_classes_annotate_but_never_change_the_risk(api):
    ToolPolicy.objects.create(pattern="echo", side_effect="external_effect")
    ToolPolicy.objects.create(pattern="ec*", side_effect="read_only")
    store(api, "crashed", WORKED_EXAMPLE)
    body = api.get("/api/v1/sessions/crashed/recovery-plan").json()
    assert [c["side_effect"] for c in body["owed_calls"]] == ["external_effect", "external_effect"]
    assert [r["data"]["metadata"]["risk"] for r in body["repairs"][:2]] == ["tool_not_started", "tool_outcome_unknown"]


def test_the_dangling_patch_over_http(staff):
    store(staff, "s", [assistant("early"), ("user_message", message("hi"))])
    preview = staff.get("/api/v1/sessions/s/dangling-calls").json()
    assert [r["data"]["tool_call_id"] for r in preview["repairs"]] == ["early"]
    applied = staff.post("/api/v1/sessions/s/patch-dangling-calls", {"digest": preview["digest"]}).json()
    assert [e["seq"] for e in applied["appended"]] == [2]
    assert staff.get("/api/v1/sessions/s/dangling-calls").json()["repairs"] == []


def test_the_dangling_patch_is_refused_while_a_turn_is_open(staff):
    store(staff, "crashed", WORKED_EXAMPLE)
    response = staff.post("/api/v1/sessions/crashed/patch-dangling-calls", {})
    assert response.status_code == 409 and response.json()["error"] == "recovery_first"
    assert Event.objects.count() == 10


CARD_CRASH = [
    ("user_message", message("pay and tell ada")),
    ("turn_start", {"turn": 1}),
    ("step_start", {"turn": 1, "step": 1}),
    ("assistant_message", message("", tool_calls=[{"id": "e1", "name": "send_email"}, {"id": "p1", "name": "charge_card"}])),
    ("tool_call", {"id": "e1", "name": "send_email"}),
    ("tool_result", message("sent", tool_call_id="e1", name="send_email")),
    ("tool_call", {"id": "p1", "name": "charge_card"}),
]


@pytest.fixture
def effect_policies(db):
    ToolPolicy.objects.create(pattern="send_email", side_effect="external_effect")
    ToolPolicy.objects.create(pattern="charge_card", side_effect="external_effect")


def test_the_plan_carries_a_strategy_per_open_turn(api, effect_policies):
    store(api, "card", CARD_CRASH)
    body = api.get("/api/v1/sessions/card/recovery-plan").json()
    assert body["strategies"] == [
        {
            "turn_seq": 1,
            "strategy": "manual_check",
            "calls": [
                {"id": "e1", "name": "send_email", "seq": 3, "class": "external_effect", "state": "completed", "verdict": None},
                {"id": "p1", "name": "charge_card", "seq": 3, "class": "external_effect", "state": "tool_outcome_unknown", "verdict": None},
            ],
        }
    ]


def test_strategies_are_outside_the_digest(api):
    store(api, "card", CARD_CRASH)
    before = api.get("/api/v1/sessions/card/recovery-plan").json()
    ToolPolicy.objects.create(pattern="*", side_effect="read_only")
    after = api.get("/api/v1/sessions/card/recovery-plan").json()
    assert (before["strategies"][0]["strategy"], after["strategies"][0]["strategy"]) == ("manual_check", "restart_turn")
    assert after["digest"] == before["digest"] and after["repairs"] == before["repairs"]


def test_recover_with_context_appends_the_plan_then_one_context_message(staff, effect_policies):
    store(staff, "card", CARD_CRASH)
    plan = staff.get("/api/v1/sessions/card/recovery-plan").json()
    response = staff.post("/api/v1/sessions/card/recover", {"digest": plan["digest"], "context": True})
    assert response.status_code == 200, response.json()
    appended = response.json()["appended"]
    assert [{"type": e["type"], "data": e["data"]} for e in appended[:-1]] == plan["repairs"]
    context = appended[-1]
    assert context["type"] == "system_message" and context["seq"] == len(CARD_CRASH) + len(plan["repairs"])
    assert context["data"]["metadata"] == {"synthetic": True, "recovery_context": True}
    assert "manual_check" in context["data"]["content"] and "charge_card (call p1, seq 3)" in context["data"]["content"]
    record = RecoveryRecord.objects.get(session_id="card")
    assert (record.context_seq, record.last_seq, record.abandoned, record.automatic) == (context["seq"], context["seq"], False, False)
    assert record.strategies == plan["strategies"]
    # The context message is a surface event: the agent resumed from the fold reads it.
    assert staff.get("/api/v1/sessions/card/messages").json()["messages"][-1]["role"] == "system"


def test_recover_without_options_appends_exactly_the_plan_and_records_the_strategy(staff, effect_policies):
    store(staff, "card", CARD_CRASH)
    plan = staff.get("/api/v1/sessions/card/recovery-plan").json()
    appended = staff.post("/api/v1/sessions/card/recover", {"digest": plan["digest"]}).json()["appended"]
    assert [{"type": e["type"], "data": e["data"]} for e in appended] == plan["repairs"]
    record = RecoveryRecord.objects.get(session_id="card")
    assert record.context_seq is None and record.strategy_names == ["manual_check"] and record.turns_closed == 1


def test_an_abandoned_recovery_applies_the_plan_and_says_so(staff, effect_policies):
    store(staff, "card", CARD_CRASH)
    plan = staff.get("/api/v1/sessions/card/recovery-plan").json()
    appended = staff.post("/api/v1/sessions/card/recover", {"digest": plan["digest"], "abandon": True, "context": True}).json()["appended"]
    assert [{"type": e["type"], "data": e["data"]} for e in appended[:-1]] == plan["repairs"]
    assert "abandoned by a person" in appended[-1]["data"]["content"]
    record = RecoveryRecord.objects.get(session_id="card")
    assert record.abandoned and record.strategy_names == ["manual_check"]
    entry = AuditEntry.objects.get(action=AuditEntry.RECOVERY, target="card")
    assert entry.detail["abandoned"] is True and entry.detail["strategies"] == ["manual_check"]


def test_context_on_a_clean_session_appends_nothing(staff):
    store(staff, "clean", [("user_message", message("hi"))])
    assert staff.post("/api/v1/sessions/clean/recover", {"context": True}).json() == {"appended": [], "next_seq": 1}


@pytest.mark.parametrize("field", ["context", "abandon"])
def test_recover_options_must_be_booleans_and_store_nothing(staff, field):
    store(staff, "card", CARD_CRASH)
    response = staff.post("/api/v1/sessions/card/recover", {field: "yes"})
    assert response.status_code == 422 and field in str(response.json())
    assert Event.objects.filter(session_id="card").count() == len(CARD_CRASH)
