"""The ledger keeps each call's idempotency key and receipt current as events arrive, in whatever order,
and agrees with a reading of the whole log (selectors.session_calls)."""

import json

import pytest
from django.contrib.auth import get_user_model
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessions_app import selectors, services
from sessions_app.log import events as log_events
from sessions_app.models import LedgerCall, Project, Session, ToolPolicy
from sessions_app.services import ledger

pytestmark = pytest.mark.django_db


def ev(type_: str, data: dict) -> log_events.NewEvent:
    return log_events.NewEvent(type_, data, None)


def entry(cid="c1", name="charge_card", **extra) -> log_events.NewEvent:
    return ev("assistant_message", {"content": "", "tool_calls": [{"id": cid, "name": name, "arguments": {"amount": 5}, **extra}]})


def dispatch(cid="c1", name="charge_card", key=None) -> log_events.NewEvent:
    data = {"id": cid, "name": name}
    if key is not None:
        data["metadata"] = {"idempotency_key": key}
    return ev("tool_call", data)


def result(cid="c1", content=None, key=None, **metadata) -> log_events.NewEvent:
    if key is not None:
        metadata["idempotency_key"] = key
    return ev("tool_result", {"tool_call_id": cid, "content": json.dumps(content or {"id": "ch_3Px"}), "metadata": metadata})


def row(sid="s", cid="c1") -> LedgerCall:
    return LedgerCall.objects.get(session_id=sid, call_id=cid)


@pytest.fixture
def policy():
    return ToolPolicy.objects.create(project=None, pattern="charge_*", side_effect=ToolPolicy.EXTERNAL_EFFECT, receipt_pointer="/id")


def test_the_tool_call_events_key_replaces_the_entrys_when_it_comes_later(policy):
    services.create_session(session_id="s")
    services.append_events(session_id="s", events=[entry(metadata={"idempotency_key": "from-entry"})])
    assert row().idempotency_key == "from-entry"
    services.append_events(session_id="s", events=[dispatch(key="from-dispatch")])
    assert row().idempotency_key == "from-dispatch"
    services.append_events(session_id="s", events=[result(key="from-result")])
    assert (row().idempotency_key, row().receipt) == ("from-dispatch", "ch_3Px")


def test_a_result_stored_before_its_call_gives_its_key_and_receipt_when_the_call_is_sighted(policy):
    services.create_session(session_id="s")
    services.append_events(session_id="s", events=[result(key="from-result", content={"id": "ch_early"})])
    services.append_events(session_id="s", events=[entry(arguments={"idempotency_key": "from-args"})])
    assert (row().idempotency_key, row().receipt) == ("from-args", "ch_early")


def test_only_the_first_real_result_gives_the_receipt_and_a_tool_without_a_pointer_has_none(policy):
    ToolPolicy.objects.create(project=None, pattern="lookup", side_effect=ToolPolicy.READ_ONLY)
    services.create_session(session_id="s")
    services.append_events(session_id="s", events=[
        entry("c1"), result("c1", {"id": "first"}), result("c1", {"id": "second"}),
        entry("c2", name="lookup"), result("c2", {"id": "x"}),
        entry("c3"), result("c3", {"id": "synthetic"}, synthetic=True),
    ])  # fmt: skip
    assert [r.receipt for r in LedgerCall.objects.filter(session_id="s").order_by("seq")] == ["first", None, None]


def test_a_projects_policy_decides_the_receipt_over_the_sites(policy):
    project = Project.objects.create(slug="billing", name="Billing")
    ToolPolicy.objects.create(project=project, pattern="charge_*", side_effect=ToolPolicy.EXTERNAL_EFFECT, receipt_pointer="/charge")
    services.create_session(session_id="s", project=project)
    services.append_events(session_id="s", events=[entry(), result(content={"id": "ch_1", "charge": "ch_2"})])
    assert row().receipt == "ch_2"


def test_a_dangling_patch_result_is_no_receipt(policy):
    services.create_session(session_id="s")
    services.append_events(session_id="s", events=[entry()])
    services.patch_dangling_calls(session_id="s", user=get_user_model().objects.create_user("ops"))
    assert row().receipt is None
    services.append_events(session_id="s", events=[result(content={"id": "ch_late"})])
    assert row().receipt == "ch_late"


def test_a_rebuild_gives_the_same_key_and_receipt(policy):
    services.create_session(session_id="s")
    services.append_events(session_id="s", events=[result(key="r"), entry(metadata={"idempotency_key": "e"})])
    before = (row().idempotency_key, row().receipt)
    LedgerCall.objects.filter(session_id="s").update(idempotency_key=None, idempotency_key_rank=None, receipt=None)
    ledger.rebuild(Session.objects.get(pk="s"))
    assert (row().idempotency_key, row().receipt) == before == ("e", "ch_3Px")


_events = st.lists(
    st.sampled_from([
        ("entry-meta", lambda: entry(metadata={"idempotency_key": "entry"})),
        ("entry-args", lambda: entry(arguments=json.dumps({"idempotency_key": "args"}))),
        ("entry-plain", lambda: entry()),
        ("dispatch", lambda: dispatch(key="dispatch")),
        ("dispatch-plain", lambda: dispatch()),
        ("result", lambda: result(key="result", content={"id": "ch_r"})),
        ("result-plain", lambda: result(content={"id": "ch_p"})),
    ]),
    min_size=1, max_size=6,
)  # fmt: skip


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(_events, st.data())
def test_the_ledger_reads_the_key_and_receipt_as_the_whole_log_does_in_any_order_and_batching(policy, picks, data):
    sid = f"s{Session.objects.count()}"
    services.create_session(session_id=sid)
    made = [make() for _, make in picks]
    while made:
        size = data.draw(st.integers(1, len(made)))
        services.append_events(session_id=sid, events=made[:size])
        made = made[size:]
    session = Session.objects.get(pk=sid)
    whole = [(r.call.call_id, r.idempotency_key, r.receipt) for r in selectors.session_calls(session, all_classes=True)]
    assert [(r.call.call_id, r.idempotency_key, r.receipt) for r in selectors.session_ledger(session, all_classes=True).rows] == whole
