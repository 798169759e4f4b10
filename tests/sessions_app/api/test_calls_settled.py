"""GET /api/v1/calls and the ledgers with verdicts (api.md, "Verdicts, receipts and reconcilers"): the default lists the
calls to check without a current verdict, ?settled=true those with one, ?settled=any both; every list carries the verdict."""

import pytest
from django.db import connection
from django.utils import timezone

from sessions_app import selectors, services
from sessions_app.models import LedgerCall, Role, Session, ToolPolicy
from sessions_app.selectors import access
from sessions_app.selectors.fleet_calls import _newest_keys
from sessions_app.services.verdicts import record_verdict, withdraw_verdict
from tests.access import member
from tests.sessions_app.api.test_calls import CRASH, quiet, store
from tests.sessions_app.api.test_calls_fleet import fleet, listed, sighted_long_ago

pytestmark = pytest.mark.django_db


@pytest.fixture
def vera(django_user_model):
    user = django_user_model.objects.create_user("vera")
    member(user, Role.OPERATOR)
    return access.Actor(user=user)


@pytest.fixture
def two_crashes(api):
    ToolPolicy.objects.create(pattern="charge_*", side_effect="external_effect")
    for sid in ("a", "b"):
        store(api, sid, CRASH)
        quiet(sid)
        sighted_long_ago(sid)


def test_the_default_lists_only_calls_without_a_current_verdict(api, two_crashes, vera):
    assert listed(api) == [("b", "p1", "tool_outcome_unknown"), ("a", "p1", "tool_outcome_unknown")]
    record_verdict(actor=vera, session_id="a", call_id="p1", outcome="happened", evidence="in Stripe", external_ref="ch_1")
    assert listed(api) == [("b", "p1", "tool_outcome_unknown")]
    assert listed(api, "?settled=false") == listed(api)
    [settled] = fleet(api, "?settled=true")["items"]
    assert settled["session_id"] == "a" and settled["verdict"] | {"at": None} == {
        "outcome": "happened", "evidence": "in Stripe", "external_ref": "ch_1", "by": "vera", "source": "person", "at": None,
    }  # fmt: skip
    assert [c["session_id"] for c in fleet(api, "?settled=any")["items"]] == ["b", "a"]
    withdraw_verdict(actor=vera, session_id="a", call_id="p1")
    assert len(listed(api)) == 2 and listed(api, "?settled=true") == []


def test_settled_works_with_states_and_a_bad_value_is_a_422(api, two_crashes, vera):
    record_verdict(actor=vera, session_id="a", call_id="p1", outcome="not_happened", evidence="nothing there")
    assert listed(api, "?state=completed&state=tool_outcome_unknown&settled=true") == [("a", "p1", "tool_outcome_unknown")]
    assert ("a", "q1", "completed") in listed(api, "?state=completed&settled=false")
    assert api.get("/api/v1/calls?settled=maybe").status_code == 422


def test_paging_the_settled_calls_keeps_each_call_once(api, vera):
    for i in range(5):
        store(api, f"s{i}", CRASH)
        quiet(f"s{i}")
        record_verdict(actor=vera, session_id=f"s{i}", call_id="p1", outcome="happened" if i % 2 else "not_happened", evidence="seen")
    first = fleet(api, "?settled=true&limit=2")
    seen = [c["session_id"] for c in first["items"]]
    cursor = first["next_cursor"]
    while cursor:
        page = fleet(api, f"?settled=true&limit=2&cursor={cursor}")
        seen += [c["session_id"] for c in page["items"]]
        cursor = page["next_cursor"]
    assert seen == ["s4", "s3", "s2", "s1", "s0"]


def test_every_list_of_calls_carries_the_current_verdict(api, two_crashes, vera):
    record_verdict(actor=vera, session_id="a", call_id="p1", outcome="happened", evidence="in Stripe")
    session = Session.objects.get(pk="a")
    by_scan = {r.call.call_id: r.verdict for r in selectors.session_calls(session, all_classes=True)}
    by_ledger = {r.call.call_id: r.verdict for r in selectors.session_ledger(session, all_classes=True).rows}
    assert by_scan["p1"].evidence == by_ledger["p1"].evidence == "in Stripe"
    assert by_scan["q1"] is None and by_ledger["q1"] is None
    assert [c["verdict"]["outcome"] if c["verdict"] else None for c in api.get("/api/v1/sessions/a/calls?all=true").json()["calls"]] == [None, "happened"]


def test_a_fork_records_its_own_verdicts_and_does_not_read_its_parents_as_its_own(api, vera):
    closed = [*CRASH, {"type": "turn_end", "data": {"reason": "completed"}}]  # p1 never answered: no_result
    store(api, "parent", closed)
    record_verdict(actor=vera, session_id="parent", call_id="p1", outcome="happened", evidence="in Stripe")
    services.fork(session_id="parent", boundary="last", new_session_id="child")
    child = Session.objects.get(pk="child")
    [inherited] = [r for r in selectors.session_ledger(child, all_classes=True).rows if r.call.call_id == "p1"]
    assert inherited.verdict is None
    record_verdict(actor=vera, session_id="child", call_id="p1", outcome="not_happened", evidence="refunded")
    [own] = [r for r in selectors.session_ledger(child, all_classes=True).rows if r.call.call_id == "p1"]
    assert own.verdict.evidence == "refunded"
    assert selectors.current_verdict("parent", "p1").evidence == "in Stripe"


def test_the_default_listing_reads_an_index_not_the_table(two_crashes, vera):
    rows = LedgerCall.objects.all()
    project = Session.objects.get(pk="a").project_id
    now = timezone.now()
    query = rows.filter(project_id=project, settled_state="tool_outcome_unknown", verdict__isnull=True).order_by("-sighted_at", "-id")
    sql, params = query.values_list("sighted_at", "id")[:51].query.sql_with_params()
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            # A table of a few rows reads faster scanned, and without statistics the planner may take the state
            # index and filter the verdict: ask only that an index serves the page in its order.
            cursor.execute("SET LOCAL enable_seqscan = off")
            cursor.execute("EXPLAIN " + sql, params)
            plan = " ".join(str(row) for row in cursor.fetchall())
            assert "Index Scan using ledger_project_" in plan and "Sort" not in plan and "Seq Scan" not in plan, plan
        else:
            cursor.execute("EXPLAIN QUERY PLAN " + sql, params)
            plan = " ".join(str(row) for row in cursor.fetchall())
            assert "ledger_project_verdict_idx" in plan and "TEMP B-TREE" not in plan, plan
    assert _newest_keys(rows, [project], None, now, 51) is not None  # the same filters the listing builds
