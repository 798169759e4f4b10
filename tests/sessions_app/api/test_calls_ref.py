"""GET /api/v1/calls?ref= (api.md, "Verdicts, receipts and reconcilers"): which call made charge ch_3Px,
by its receipt, its idempotency key or a current verdict's external_ref, whatever its state."""

import json

import pytest

from sessions_app import services, worker
from sessions_app.log.events import validate_batch
from sessions_app.models import LedgerCall, Project, ToolPolicy
from sessions_app.services import receipts
from tests.sessions_app.api.test_calls import ev, store
from tests.sessions_app.api.http import assert_error
from tests.sessions_app.api.test_calls_fleet import fleet
from tests.sessions_app.log.strategies import message

pytestmark = pytest.mark.django_db


def charge(cid: str, *, key=None, receipt="ch_3Px", arguments=None) -> list[dict]:
    call = {"id": cid, "name": "charge_card", "arguments": arguments or {"cents": 500}}
    dispatch = {"id": cid, "name": "charge_card"}
    if key is not None:
        dispatch["metadata"] = {"idempotency_key": key}
    return [
        ev("assistant_message", message("", tool_calls=[call])),
        ev("tool_call", dispatch),
        ev("tool_result", message(json.dumps({"id": receipt, "status": "succeeded"}), tool_call_id=cid)),
    ]


def refs(client, ref: str, more: str = "") -> list[tuple]:
    return [(c["session_id"], c["call_id"], c["idempotency_key"], c["receipt"]) for c in fleet(client, f"?ref={ref}{more}")["items"]]


@pytest.fixture
def pointer(db):
    return ToolPolicy.objects.create(pattern="charge_*", side_effect="external_effect", receipt_pointer="/id")


def test_a_completed_call_is_found_by_its_receipt_or_its_key_though_the_default_lists_only_calls_to_check(api, pointer):
    store(api, "s", charge("c1", key="order-42-charge"))
    assert fleet(api)["items"] == []
    assert refs(api, "ch_3Px") == refs(api, "order-42-charge") == [("s", "c1", "order-42-charge", "ch_3Px")]
    assert refs(api, "ch_3P") == []  # exactly
    assert refs(api, "ch_3Px", "&state=tool_outcome_unknown") == []  # a state given still filters


def test_a_key_among_the_arguments_shows_on_the_call_and_finds_it(api):
    store(api, "s", charge("c1", arguments={"cents": 5, "idempotency_key": "pay-7"}))
    assert refs(api, "pay-7") == [("s", "c1", "pay-7", None)]  # no pointer: no receipt


def test_a_current_verdicts_external_ref_finds_the_call(api, pointer, django_user_model):
    store(api, "s", charge("c1"))
    LedgerCall.objects.filter(session_id="s").update(verdict="happened", verdict_ref="re_99")
    assert [c["call_id"] for c in fleet(api, "?ref=re_99")["items"]] == ["c1"]


def test_only_the_callers_projects_are_searched(api, pointer):
    other = Project.objects.create(slug="other", name="Other")
    services.create_session(session_id="theirs", project=other)
    store(api, "mine", charge("c1"))
    services.append_events(session_id="theirs", events=validate_batch(charge("c9")))
    assert refs(api, "ch_3Px") == [("mine", "c1", None, "ch_3Px")]


def test_a_pointer_added_after_the_calls_were_stored_reaches_ref_through_the_worker(api):
    store(api, "s", charge("c1", receipt="ch_later"))
    assert refs(api, "ch_later") == []
    policy = ToolPolicy.objects.create(pattern="charge_*", side_effect="external_effect", receipt_pointer="/id")
    receipts.sweep_for_policy_change(project_id=None, pattern=policy.pattern)
    worker.sweep_receipts(batches=None)
    assert refs(api, "ch_later") == [("s", "c1", None, "ch_later")]


def test_a_nul_in_ref_is_refused(api):
    response = api.get("/api/v1/calls?ref=a%00b")
    assert_error(response, 422)
    assert "ref" in response.content.decode()


def test_the_search_api_begins_its_first_page_with_the_call_a_reference_names(api, pointer):
    store(api, "s", charge("c1", key="order-42-charge"))
    response = api.get("/api/v1/search?q=order-42-charge")
    assert response.status_code == 200, response.content
    first = response.json()["items"][0]
    assert first | {"highlights": None} == {
        "kind": "event", "session_id": "s", "seq": 0, "type": "assistant_message", "note_id": None,
        "snippet": "charge_card call c1 · key: order-42-charge · receipt: ch_3Px", "highlights": None,
    }  # fmt: skip
    start, end = first["highlights"][0]
    assert first["snippet"][start:end] == "order-42-charge"
    assert [(h["session_id"], h["seq"]) for h in response.json()["items"]].count(("s", 0)) == 1
