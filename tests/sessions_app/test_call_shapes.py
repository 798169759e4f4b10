"""Tool calls in OpenAI's chat shape (session-log.md section 1) through storage, the API, the worker,
the CLI and the migration that recomputes names stored before: SQLite, then PostgreSQL."""

from __future__ import annotations

import importlib
import io
import json
from datetime import timedelta
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db import connection
from django.db.migrations.loader import MigrationLoader
from django.utils import timezone

from sessions_app import worker
from sessions_app.models import AutoRecoveryPolicy, CallSighting, Event, RecoveryRecord, Role, Session, ToolPolicy
from tests.access import token_for
from tests.conftest import ApiClient
from tests.sessions_app import factories as f

pytestmark = pytest.mark.django_db


def chat_call(cid: str, name: str, arguments: dict) -> dict:
    """A call as OpenAI's chat API sends it."""
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def assistant(*calls: dict) -> dict:
    return f.event("assistant_message", content="", name=None, metadata={}, tool_calls=list(calls))


def crashed_checkout() -> list[dict]:
    """The worked example of session-log.md section 4, its calls in the chat shape: c2 (charge_card) owed,
    not started (rule 2); c3 (charge_card) dispatched, outcome unknown (rule 1)."""
    return [
        f.user("charge me twice"),
        f.event("turn_start", turn=1),
        f.event("step_start", turn=1, step=1),
        assistant(chat_call("c1", "lookup_customer", {"id": 42}), chat_call("c2", "charge_card", {"amount": 500})),
        f.event("tool_call", **chat_call("c1", "lookup_customer", {"id": 42})),
        f.event("tool_result", tool_call_id="c1", name="lookup_customer", content="{\"plan\": \"pro\"}", metadata={}),
        f.event("step_end", turn=1, step=1, outcome="ok"),
        f.event("step_start", turn=1, step=2),
        assistant(chat_call("c3", "charge_card", {"amount": 700})),
        f.event("tool_call", **chat_call("c3", "charge_card", {"amount": 700})),
    ]


@pytest.fixture
def policies(db):
    ToolPolicy.objects.create(pattern="charge_card", side_effect=ToolPolicy.EXTERNAL_EFFECT)
    ToolPolicy.objects.create(pattern="lookup_*", side_effect=ToolPolicy.READ_ONLY)


@pytest.fixture
def operator_api(django_user_model):
    return ApiClient(token_for(django_user_model.objects.create_user("ops", is_staff=True), role=Role.OPERATOR))


def post(api, session_id: str, events: list[dict]) -> None:
    assert api.post("/api/v1/sessions", {"id": session_id, "agent_name": "checkout-bot"}).status_code == 201
    response = api.post(f"/api/v1/sessions/{session_id}/events", {"events": events})
    assert response.status_code == 201, response.content


def test_the_plan_names_chat_shaped_calls_and_their_policy_applies(api, policies):
    post(api, "checkout", crashed_checkout())
    plan = api.get("/api/v1/sessions/checkout/recovery-plan").json()
    repairs = [(r["type"], r["data"].get("tool_call_id"), r["data"].get("name"), r["data"].get("metadata", {}).get("risk")) for r in plan["repairs"]]
    assert repairs == [
        ("tool_result", "c2", "charge_card", "tool_not_started"),
        ("tool_result", "c3", "charge_card", "tool_outcome_unknown"),
        ("turn_end", None, None, None),
    ]
    owed = [(c["id"], c["name"], c["arguments"], c["rule"], c["side_effect"]) for c in plan["owed_calls"]]
    assert owed == [("c2", "charge_card", {"amount": 500}, 2, "external_effect"), ("c3", "charge_card", {"amount": 700}, 1, "external_effect")]
    assert plan["strategies"] == [{
        "turn_seq": 1, "strategy": "manual_check", "calls": [
            {"id": "c2", "name": "charge_card", "seq": 3, "class": "external_effect", "state": "tool_not_started", "verdict": None},
            {"id": "c3", "name": "charge_card", "seq": 8, "class": "external_effect", "state": "tool_outcome_unknown", "verdict": None},
        ],
    }]  # fmt: skip


def test_a_read_only_chat_shaped_crash_is_safe_to_restart_and_recovered_automatically(api, policies):
    """Read as unnamed, the call's class was unknown: manual_check, and the worker left it for a person."""
    events = [
        f.event("turn_start", turn=1),
        f.event("step_start", turn=1, step=1),
        assistant(chat_call("c1", "lookup_order", {"order": 7})),
        f.event("tool_call", **chat_call("c1", "lookup_order", {"order": 7})),
    ]
    post(api, "indexer", events)
    (turn,) = api.get("/api/v1/sessions/indexer/recovery-plan").json()["strategies"]
    assert turn == {"turn_seq": 0, "strategy": "restart_turn", "calls": []}
    AutoRecoveryPolicy.objects.create(agent_pattern="*")
    Session.objects.filter(pk="indexer").update(last_activity_at=timezone.now() - timedelta(hours=1))
    assert [(a.session_id, a.outcome) for a in worker.run_round()] == [("indexer", worker.RECOVERED)]
    appended = Event.objects.get(session_id="indexer", seq=4)
    assert appended.data["name"] == "lookup_order" and appended.data["metadata"]["risk"] == "tool_outcome_unknown"


def test_recovery_appends_the_name_and_records_it_while_the_log_keeps_what_was_sent(api, operator_api, policies):
    sent = crashed_checkout()
    post(api, "checkout", sent)
    plan = api.get("/api/v1/sessions/checkout/recovery-plan").json()
    recovered = operator_api.post("/api/v1/sessions/checkout/recover", {"digest": plan["digest"]})
    assert recovered.status_code == 200, recovered.content
    assert [e["data"].get("name") for e in recovered.json()["appended"]] == ["charge_card", "charge_card", None]
    record = RecoveryRecord.objects.get(session_id="checkout")
    assert [c["name"] for s in record.strategies for c in s["calls"]] == ["charge_card", "charge_card"]
    stored = api.get("/api/v1/sessions/checkout/events").json()["events"][: len(sent)]
    assert [e["data"] for e in stored] == [e["data"] for e in sent]  # exactly as sent: arguments still JSON text
    exported = api.get("/api/v1/sessions/checkout/export").json()
    assert [e["data"] for e in exported["events"][: len(sent)]] == [e["data"] for e in sent]


def sightings(session_id: str) -> list[tuple]:
    return list(CallSighting.objects.filter(session_id=session_id).order_by("seq", "call_id").values_list("seq", "call_id", "tool_name"))


def test_sightings_hold_the_names_and_the_list_finds_the_session_by_them(api):
    post(api, "checkout", crashed_checkout())
    assert sightings("checkout") == [(3, "c1", "lookup_customer"), (3, "c2", "charge_card"), (8, "c3", "charge_card")]
    found = api.get("/api/v1/sessions", {"q": "charge_c"}).json()
    assert [s["id"] for s in found["items"]] == ["checkout"]


def test_a_fork_copies_the_sightings_with_their_names(api):
    events = crashed_checkout()[:6] + [f.event("step_end", turn=1, step=1, outcome="ok"), f.event("turn_end", turn=1, steps=1, reason="complete")]
    post(api, "done", events)
    assert api.post("/api/v1/sessions/done/fork", {"id": "done-fork"}).status_code == 201
    assert sightings("done-fork") == sightings("done") == [(3, "c1", "lookup_customer"), (3, "c2", "charge_card")]


def test_the_cli_status_names_chat_shaped_calls_with_their_class(api, policies):
    post(api, "checkout", crashed_checkout())
    out = io.StringIO()
    call_command("sessions", "status", "checkout", stdout=out)
    status = out.getvalue()
    c2, c3 = [line for line in status.splitlines() if line.strip().startswith(("c2 ", "c3 "))]
    assert c2.split()[:2] == ["c2", 'charge_card({"amount":'] and "side effect: external_effect" in c2
    assert "Outcome unknown" in c3 and "side effect: external_effect" in c3
    assert "verify in the outside system: charge_card (call c3, seq 8, external_effect)" in status


# The migration that recomputes names stored before -----------------------------------


def migration_module():
    """The data migration, found by its name (the lead may renumber it)."""
    (path,) = Path(__file__).parents[2].joinpath("sessions_app", "migrations").glob("*_openai_chat_call_names.py")
    return importlib.import_module(f"sessions_app.migrations.{path.stem}")


def migrated_apps():
    """The models as the migrations describe them (plain managers: the migration may update)."""
    loader = MigrationLoader(connection)
    return loader.project_state(loader.graph.leaf_nodes("sessions_app")).apps


def set_stored_name(session_id: str, call_id: str, name: str) -> None:
    """What the code before this change stored for the call (a test's setup: no code path updates a sighting)."""
    table = connection.ops.quote_name(CallSighting._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE {table} SET tool_name = %s WHERE session_id = %s AND call_id = %s", [name, session_id, call_id])


def test_the_migration_recomputes_the_names_stored_before(api, operator_api, policies):
    post(api, "checkout", crashed_checkout())
    plan = api.get("/api/v1/sessions/checkout/recovery-plan").json()
    assert operator_api.post("/api/v1/sessions/checkout/recover", {"digest": plan["digest"]}).status_code == 200
    post(api, "plain", [f.event("assistant_message", content="", tool_calls=[{"id": "p1", "name": True}, {"id": "p2", "name": "kept"}])])
    # As the code before stored them: no name for the chat shape, a boolean name in Python's spelling.
    for cid in ("c1", "c2", "c3"):
        set_stored_name("checkout", cid, "")
    set_stored_name("plain", "p1", "True")
    record = RecoveryRecord.objects.get(session_id="checkout")
    old_strategies = [{**s, "calls": [{**c, "name": None, "class": "unknown"} for c in s["calls"]]} for s in record.strategies]
    RecoveryRecord.objects.filter(pk=record.pk).update(strategies=old_strategies)
    events_before = list(Event.objects.order_by("session_id", "seq").values_list("session_id", "seq", "data"))

    migration_module().recompute_call_names(migrated_apps(), None)

    assert sightings("checkout") == [(3, "c1", "lookup_customer"), (3, "c2", "charge_card"), (8, "c3", "charge_card")]
    assert sightings("plain") == [(0, "p1", "true"), (0, "p2", "kept")]
    record.refresh_from_db()
    # The names filled in; the classes and the strategy stay as they were decided.
    assert [(c["name"], c["class"]) for s in record.strategies for c in s["calls"]] == [("charge_card", "unknown")] * 2
    assert list(Event.objects.order_by("session_id", "seq").values_list("session_id", "seq", "data")) == events_before
    migration_module().recompute_call_names(migrated_apps(), None)  # again: nothing left to change
    assert sightings("checkout")[2] == (8, "c3", "charge_card")


def test_the_migration_follows_the_receive_times_and_only_runs_python():
    migration = migration_module().Migration
    assert ("sessions_app", "0006_event_received_at") in migration.dependencies
    assert [type(op).__name__ for op in migration.operations] == ["RunPython"]
