"""verdicts.py over HTTP: recording, withdrawing and reading a call's verdicts, queueing a check, and what
a verdict changes in the recovery plan (api.md, "Verdicts, receipts and reconcilers"; session-log.md 8.2)."""

import json
from urllib.parse import quote

import pytest
from django.utils import timezone

from sessions_app.models import AuditEntry, CallCheck, CheckAttempt, Event, LedgerCall, Role, ToolPolicy, Verdict
from tests.access import token_for
from tests.conftest import ApiClient
from tests.sessions_app import factories as f
from tests.sessions_app.api.http import append, assert_error, make_session

pytestmark = pytest.mark.django_db


class Client(ApiClient):
    def put(self, path, body=None, **headers):
        raw = body if isinstance(body, bytes) else json.dumps(body if body is not None else {})
        return self.client.put(path, raw, content_type="application/json", headers={**self.headers, **headers})

    def delete_with(self, path, body, **headers):
        return self.client.delete(path, json.dumps(body), content_type="application/json", headers={**self.headers, **headers})


@pytest.fixture
def ops(django_user_model):
    """An operator of the default project: may recover, so may record verdicts."""
    return Client(token_for(django_user_model.objects.create_user("vera", is_staff=True), role=Role.OPERATOR))


@pytest.fixture
def member(django_user_model):
    return Client(token_for(django_user_model.objects.create_user("mo")))


def crashed(api, session_id="s1", call_ids=("c1",)):
    """A turn that dispatched its calls and crashed: each call's outcome is unknown."""
    make_session(api, session_id)
    events = [f.user(), f.event("turn_start", turn=1), f.event("step_start", turn=1, step=1), f.assistant(calls=list(call_ids))]
    events += [f.tool_call(c) for c in call_ids]
    response = append(api, session_id, events)
    assert response.status_code == 201, response.content


def path(call_id, action="verdict", session_id="s1"):
    return f"/api/v1/sessions/{session_id}/calls/{quote(call_id, safe='')}/{action}"


def event_rows():
    return list(Event.objects.order_by("session_id", "seq").values_list("session_id", "seq", "type", "data"))


def test_a_verdict_is_recorded_shown_on_the_call_and_changes_no_event(ops):
    crashed(ops)
    before, (listed_before,) = event_rows(), ops.get("/api/v1/sessions/s1/calls", {"all": "true"}).json()["calls"]
    response = ops.put(path("c1"), {"outcome": "happened", "evidence": "bank portal shows the wire", "external_ref": "W-123"})
    assert response.status_code == 200, response.content
    call = response.json()
    assert call["call_id"] == "c1" and call["state"] == listed_before["state"]
    assert {k: v for k, v in call.items() if k != "verdict"} == {k: v for k, v in listed_before.items() if k != "verdict"}
    verdict = call["verdict"]
    assert {k: verdict[k] for k in ("outcome", "evidence", "external_ref", "by", "source")} == {
        "outcome": "happened", "evidence": "bank portal shows the wire", "external_ref": "W-123", "by": "vera", "source": "person",
    }  # fmt: skip
    assert event_rows() == before
    assert LedgerCall.objects.get(session_id="s1", call_id="c1").verdict == "happened"
    listed = ops.get("/api/v1/sessions/s1/calls").json()["calls"]
    assert [c["verdict"]["outcome"] if c["verdict"] else None for c in listed if c["call_id"] == "c1"] in (["happened"], [None])


def test_the_plan_carries_the_verdict_and_a_preview_before_it_is_stale(ops):
    crashed(ops)
    before = ops.get("/api/v1/sessions/s1/recovery-plan").json()
    assert ops.put(path("c1"), {"outcome": "not_happened", "evidence": "no wire in the portal"}).status_code == 200
    after = ops.get("/api/v1/sessions/s1/recovery-plan").json()
    (result,) = [r for r in after["repairs"] if r["type"] == "tool_result"]
    assert result["data"]["metadata"]["risk"] == "tool_outcome_unknown"
    assert result["data"]["metadata"]["verdict"]["outcome"] == "not_happened"
    assert result["data"]["metadata"]["verdict"]["by"] == "vera"
    assert "verified as not having happened by vera: no wire in the portal" in result["data"]["content"]
    assert after["digest"] != before["digest"]
    assert [c["verdict"] for s in after["strategies"] for c in s["calls"]] == ["not_happened"]
    assert [s["strategy"] for s in after["strategies"]] == ["restart_turn"]

    stale = ops.post("/api/v1/sessions/s1/recover", {"digest": before["digest"]})
    body = assert_error(stale, 409, "stale_plan")
    assert body["plan"]["digest"] == after["digest"]
    applied = ops.post("/api/v1/sessions/s1/recover", {"digest": after["digest"], "context": True})
    assert applied.status_code == 200, applied.content
    stored = [e["data"] for e in applied.json()["appended"]]
    assert stored[0]["metadata"]["verdict"]["evidence"] == "no wire in the portal"
    assert "verified not happened by vera" in stored[-1]["content"]


def test_a_withdrawn_verdict_stays_in_the_history(ops):
    crashed(ops)
    ops.put(path("c1"), {"outcome": "happened", "evidence": "seen"})
    ops.put(path("c1"), {"outcome": "not_happened", "evidence": "looked again: not there"})
    response = ops.delete_with(path("c1"), {"reason": "wrong account"})
    assert response.status_code == 200, response.content
    assert response.json()["verdict"] is None
    history = ops.get(path("c1", "verdicts"))
    assert history.status_code == 200, history.content
    verdicts = history.json()["verdicts"]
    assert [(v["outcome"], v["withdrawn_by"]) for v in verdicts] == [("happened", "vera"), ("not_happened", "vera")]
    assert verdicts[0]["withdrawn_at"] == verdicts[1]["at"]
    assert all(v["withdrawn_at"] for v in verdicts)
    assert history.json()["attempts"] == []
    assert_error(ops.delete(path("c1")), 404, "not_found")  # no current verdict (an empty body is fine)
    actions = list(AuditEntry.objects.filter(target="s1").values_list("action", flat=True))
    assert actions.count(AuditEntry.VERDICT_RECORDED) == 2 and actions.count(AuditEntry.VERDICT_WITHDRAWN) == 1


def test_attempts_are_listed_oldest_first(ops):
    crashed(ops)
    now = timezone.now()
    CheckAttempt.objects.create(session_id="s1", call_id="c1", pattern="tool_*", at=now, status=200, outcome="unknown")
    CheckAttempt.objects.create(session_id="s1", call_id="c1", pattern="tool_*", at=now - timezone.timedelta(minutes=1), error="timed out")
    attempts = ops.get(path("c1", "verdicts")).json()["attempts"]
    assert [(a["status"], a["outcome"], a["error"]) for a in attempts] == [(None, None, "timed out"), (200, "unknown", None)]


@pytest.mark.parametrize("call_id", ["a/b", "50%", "what?", "#1", "a/verdict", "x/verdicts", "ü nicode"])
def test_a_call_id_is_one_percent_encoded_segment(ops, call_id):
    crashed(ops, call_ids=(call_id, "other"))
    response = ops.put(path(call_id), {"outcome": "happened", "evidence": "seen"})
    assert response.status_code == 200, response.content
    assert response.json()["call_id"] == call_id
    assert Verdict.objects.get().call_id == call_id
    assert [v["outcome"] for v in ops.get(path(call_id, "verdicts")).json()["verdicts"]] == ["happened"]
    assert ops.get(path("other", "verdicts")).json()["verdicts"] == []
    assert ops.delete(path(call_id)).status_code == 200


def test_unknown_sessions_and_calls_are_404(ops):
    crashed(ops)
    assert_error(ops.put(path("c1", session_id="nope"), {"outcome": "happened", "evidence": "x"}), 404, "not_found")
    assert_error(ops.put(path("c9"), {"outcome": "happened", "evidence": "x"}), 404, "not_found")
    assert_error(ops.get(path("c9", "verdicts")), 404, "not_found")
    assert_error(ops.post(path("c9", "check")), 404, "not_found")
    assert_error(ops.delete(path("c9")), 404, "not_found")
    assert not Verdict.objects.exists()


def test_a_forks_inherited_call_takes_a_verdict_of_its_own(ops):
    make_session(ops, "parent")
    append(ops, "parent", [f.user(), f.assistant(calls=["c1"]), f.tool_call("c1"), f.user("more")])
    ops.put(path("c1", session_id="parent"), {"outcome": "happened", "evidence": "seen"})
    fork = ops.post("/api/v1/sessions/parent/fork", {"boundary": 3, "id": "child"})
    assert fork.status_code == 201, fork.content
    response = ops.put(path("c1", session_id="child"), {"outcome": "not_happened", "evidence": "in the child: not there"})
    assert response.status_code == 200, response.content
    assert response.json()["session_id"] == "child" and response.json()["verdict"]["outcome"] == "not_happened"
    assert ops.get(path("c1", session_id="parent", action="verdicts")).json()["verdicts"][0]["outcome"] == "happened"


def test_members_read_verdicts_but_only_those_who_may_recover_record_them(ops, member, django_user_model):
    crashed(ops)
    body = {"outcome": "happened", "evidence": "seen"}
    assert_error(member.put(path("c1"), body), 403, "forbidden")
    assert_error(member.post(path("c1", "check")), 403, "forbidden")
    ops.put(path("c1"), body)
    assert_error(member.delete(path("c1")), 403, "forbidden")
    assert member.get(path("c1", "verdicts")).status_code == 200
    scoped = Client(token_for(django_user_model.objects.get(username="vera"), role=Role.OPERATOR, scopes=["read", "append"]))
    assert_error(scoped.put(path("c1"), body), 403, "forbidden")
    recover_scope = Client(token_for(django_user_model.objects.get(username="vera"), role=Role.OPERATOR, scopes=["read", "recover"]))
    assert recover_scope.put(path("c1"), {"outcome": "not_happened", "evidence": "again"}).status_code == 200


@pytest.mark.parametrize(
    "body, where",
    [
        ({"outcome": "maybe", "evidence": "x"}, "outcome"),
        ({"evidence": "x"}, "outcome"),
        ({"outcome": "happened", "evidence": ""}, "evidence"),
        ({"outcome": "happened", "evidence": "   "}, "evidence"),
        ({"outcome": "happened", "evidence": 42}, "evidence"),
        ({"outcome": "happened", "evidence": "x" * 4001}, "evidence"),
        ({"outcome": "happened", "evidence": "x", "external_ref": "r" * 501}, "external_ref"),
        ({"outcome": "happened", "evidence": "x", "external_ref": 7}, "external_ref"),
        ({"outcome": "happened", "evidence": "x" * (10 * 1024 * 1024)}, "evidence"),
    ],
)
def test_bad_input_is_a_clear_422_and_stores_nothing(ops, body, where):
    crashed(ops)
    response = ops.put(path("c1"), body)
    answer = assert_error(response, 422)
    assert where in answer["detail"] or where in json.dumps(answer.get("errors", "")) or answer.get("field") == where
    assert not Verdict.objects.exists() and LedgerCall.objects.get(session_id="s1", call_id="c1").verdict is None


def test_a_body_that_is_not_json_is_400(ops):
    crashed(ops)
    assert_error(ops.put(path("c1"), b"{not json"), 400)
    assert not Verdict.objects.exists()


def test_check_queues_a_pending_check_due_now_or_says_there_is_no_reconciler(ops):
    crashed(ops)
    assert_error(ops.post(path("c1", "check")), 409, "no_reconciler")
    ToolPolicy.objects.create(pattern="tool_*", side_effect="external_effect", check_url="https://checks.example/charge")
    response = ops.post(path("c1", "check"))
    assert response.status_code == 202, response.content
    assert response.json()["policy"] == "tool_*"
    check = CallCheck.objects.get()
    assert (check.session_id, check.call_id, check.state, check.attempts) == ("s1", "c1", CallCheck.PENDING, 0)
    assert check.next_at <= timezone.now()
    CallCheck.objects.update(state=CallCheck.GAVE_UP, attempts=5)
    assert ops.post(path("c1", "check")).status_code == 202
    check.refresh_from_db()
    assert (check.state, check.attempts, CallCheck.objects.count()) == (CallCheck.PENDING, 0, 1)


def test_recording_a_verdict_counts_as_activity_for_retention(ops):
    from sessions_app.models import Session

    crashed(ops)
    Session.objects.filter(pk="s1").update(retained_from=timezone.now() - timezone.timedelta(days=30))
    ops.put(path("c1"), {"outcome": "happened", "evidence": "seen"})
    assert Session.objects.get(pk="s1").retained_from > timezone.now() - timezone.timedelta(minutes=1)


def test_export_carries_every_verdict_and_import_keeps_them_with_authors_as_text(ops):
    crashed(ops, call_ids=("c1", "c2"))
    ops.put(path("c1"), {"outcome": "happened", "evidence": "seen", "external_ref": "W-1"})
    ops.put(path("c1"), {"outcome": "not_happened", "evidence": "looked again"})
    ops.put(path("c2"), {"outcome": "happened", "evidence": "in the outbox"})
    ops.delete_with(path("c2"), {"reason": "wrong mailbox"})
    blob = ops.get("/api/v1/sessions/s1/export").json()
    exported = blob["verdicts"]
    assert [(v["call_id"], v["outcome"], v["withdrawn_at"] is not None) for v in exported] == [
        ("c1", "happened", True), ("c1", "not_happened", False), ("c2", "happened", True),
    ]  # fmt: skip
    assert set(exported[0]) == {
        "call_id", "outcome", "evidence", "external_ref", "by", "source", "at", "withdrawn_at", "withdrawn_by", "withdraw_reason",
    }  # fmt: skip
    assert (exported[2]["withdrawn_by"], exported[2]["withdraw_reason"]) == ("vera", "wrong mailbox")

    blob["verdicts"].append({"call_id": "nope", "outcome": "happened", "evidence": "x", "by": "someone"})
    blob["verdicts"].append({"call_id": "c2", "outcome": "perhaps", "evidence": "x", "by": "someone"})
    response = ops.post("/api/v1/sessions/import?id=copy", blob)
    assert response.status_code == 201, response.content
    warnings = response.json()["warnings"]
    assert any("'nope'" in w for w in warnings) and any(w.startswith("verdicts[4] dropped") for w in warnings)
    history = ops.get(path("c1", "verdicts", session_id="copy")).json()["verdicts"]
    assert [(v["outcome"], v["by"], v["withdrawn_at"]) for v in history] == [(v["outcome"], v["by"], v["withdrawn_at"]) for v in exported[:2]]
    assert Verdict.objects.filter(session_id="copy", user__isnull=False).count() == 0
    rows = dict(LedgerCall.objects.filter(session_id="copy").values_list("call_id", "verdict"))
    assert rows == {"c1": "not_happened", "c2": None}
    plan = ops.get("/api/v1/sessions/copy/recovery-plan").json()
    assert [r["data"]["metadata"].get("verdict", {}).get("outcome") for r in plan["repairs"] if r["type"] == "tool_result"] == ["not_happened", None]


def test_a_call_id_holding_nul_matches_no_route_and_a_wrong_method_is_405(ops):
    crashed(ops)
    assert_error(ops.put("/api/v1/sessions/s1/calls/c%001/verdict", {"outcome": "happened", "evidence": "x"}), 404, "not_found")
    assert_error(ops.get(path("c1")), 405, "method_not_allowed")
    assert not Verdict.objects.exists()
