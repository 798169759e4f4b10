"""dashboard.pages.ledger: the ledger at the top of a session page, as /calls states its rows."""

import re

import pytest
from django.contrib.auth import get_user_model
from django.utils.html import escape

from dashboard.pages import ledger as ledger_panel
from sessions_app import selectors, services
from sessions_app.log.events import validate_batch
from sessions_app.models import Session, ToolPolicy
from tests.sessions_app.log.strategies import message
from tests.sessions_app.services.test_recovery import store

pytestmark = pytest.mark.django_db

ROW = re.compile(r'<tr id="ledger-[0-9a-f]+" class="ledger-row [^"]*" data-call="(?P<cid>[^"]*)" data-state="(?P<state>[^"]+)"')


def call(cid: str, name: str, **arguments) -> dict:
    return {"id": cid, "name": name, "arguments": arguments}


def assistant(*calls: dict) -> tuple[str, dict]:
    return ("assistant_message", message("", tool_calls=list(calls)))


def answer(cid: str, name: str) -> tuple[str, dict]:
    return ("tool_result", message("done", tool_call_id=cid, name=name))


# A crash in turn 1: the lookup answered, the charge dispatched and never answered, an email only asked for.
CRASH = [
    ("user_message", message("refund ada")),
    ("turn_start", {"turn": 1}),
    assistant(call("q1", "lookup_customer", who="ada")),
    answer("q1", "lookup_customer"),
    assistant(call("e1", "send_email", to="ada@example.test")),
    answer("e1", "send_email"),
    assistant(call("p1", "charge_card", cents=500, note="x" * 200)),
    ("tool_call", {"id": "p1", "name": "charge_card"}),
]


@pytest.fixture
def policies():
    ToolPolicy.objects.create(pattern="lookup_*", side_effect=ToolPolicy.READ_ONLY)
    ToolPolicy.objects.create(pattern="charge_*", side_effect=ToolPolicy.EXTERNAL_EFFECT)
    ToolPolicy.objects.create(pattern="send_email", side_effect=ToolPolicy.EXTERNAL_EFFECT)


def panel(client, session_id: str, query: str = "") -> str:
    response = client.get(f"/sessions/{session_id}/{query}")
    assert response.status_code == 200
    page = response.content.decode()
    return page[page.index('id="ledger-panel"') :].split("</section>")[0]


def rows(html: str) -> list[tuple[str, str]]:
    return [(m["cid"], m["state"]) for m in ROW.finditer(html)]


def test_unknown_outcomes_of_external_calls_come_first_and_read_only_calls_wait_for_the_switch(viewer, policies):
    store(CRASH, session_id="crashed")  # stalled since January
    assert rows(panel(viewer, "crashed")) == [("p1", "tool_outcome_unknown"), ("e1", "completed")]
    assert rows(panel(viewer, "crashed", "?calls=all")) == [("p1", "tool_outcome_unknown"), ("q1", "completed"), ("e1", "completed")]


def test_a_row_gives_name_short_arguments_state_time_turn_and_links_to_its_card(viewer, policies):
    store(CRASH, session_id="crashed")
    html = panel(viewer, "crashed")
    p1 = html[html.index('data-call="p1"') :].split("</tr>")[0]
    anchor = re.search(r'href="#(call-[0-9a-f]+)"', p1)[1]
    # Shortened (PostgreSQL's jsonb keeps an object's keys in its own order: either may come first).
    assert "…" in p1 and "x" * 100 not in p1 and ("cents=500, note=" in p1 or escape('note="xxx') in p1)
    assert '<span class="badge state">tool_outcome_unknown</span>' in p1 and 'href="#seq-1">turn 1</a>' in p1
    assert 'href="#seq-6">seq 6</a>' in p1 and "<time datetime=" in p1
    page = viewer.get("/sessions/crashed/").content.decode()
    assert f'id="{anchor}" data-call-id="p1" data-state="tool_outcome_unknown"' in page


def test_the_rows_are_those_of_the_calls_endpoint_after_recovery_and_a_late_result(viewer, policies):
    store(CRASH, session_id="crashed")
    services.recover(session_id="crashed", user=get_user_model().objects.get(username="viewer"))
    services.append_events(session_id="crashed", events=validate_batch([{"type": "tool_result", "data": answer("p1", "charge_card")[1]}]))
    expected = [(r.call.call_id, r.call.state) for r in selectors.session_calls(Session.objects.get(), all_classes=False)]
    assert expected == [("e1", "completed"), ("p1", "superseded")]
    assert rows(panel(viewer, "crashed")) == [("p1", "superseded"), ("e1", "completed")]  # a call to check comes first


def test_a_long_session_lists_every_call_to_check_and_the_latest_others(viewer, policies, monkeypatch):
    monkeypatch.setattr(ledger_panel, "ROWS", 1)
    store(CRASH, session_id="crashed")
    services.recover(session_id="crashed", user=get_user_model().objects.get(username="viewer"))
    services.append_events(session_id="crashed", events=validate_batch([{"type": "tool_result", "data": answer("p1", "charge_card")[1]}]))
    for n in range(3):  # newer calls: the superseded one stays, however old
        answered = [assistant(call(f"n{n}", "charge_card")), answer(f"n{n}", "charge_card")]
        services.append_events(session_id="crashed", events=validate_batch([{"type": t, "data": d} for t, d in answered]))
    html = panel(viewer, "crashed")
    assert rows(html) == [("p1", "superseded"), ("n2", "completed")]
    assert 'href="/api/v1/sessions/crashed/calls">all of them</a>' in html


def test_the_switch_is_a_plain_link_and_the_live_socket_is_told(viewer, policies):
    store(CRASH, session_id="crashed")
    assert 'href="/sessions/crashed/?calls=all">Show all calls</a>' in panel(viewer, "crashed")
    page = viewer.get("/sessions/crashed/?calls=all").content.decode()
    assert 'href="/sessions/crashed/?">Show only external effects and unknown</a>' in page
    assert 'ws-connect="/ws/sessions/crashed/live?after=7&amp;calls=all"' in page
    assert 'ws-connect="/ws/sessions/crashed/live?after=7"' in viewer.get("/sessions/crashed/").content.decode()
    raw = viewer.get("/sessions/crashed/?view=raw&calls=all").content.decode()
    assert "&amp;calls=all" in raw.split("ws-connect=")[1].split(">")[0]


def test_a_session_without_calls_says_so(viewer):
    store([("user_message", message("hi"))], session_id="quiet")
    assert "No call of a tool with external effects or without a policy." in panel(viewer, "quiet")
    assert "No tool calls yet." in panel(viewer, "quiet", "?calls=all")


def test_hostile_names_and_arguments_stay_text(viewer):
    hostile = "<script>alert(1)</script>"
    store([assistant(call("h1", hostile, html=hostile))], session_id="h")
    html = panel(viewer, "h")
    assert hostile not in html and escape(hostile) in html


@pytest.mark.parametrize(
    ("arguments", "short"),
    [
        (None, ""), ({"a": 1, "b": "two"}, 'a=1, b="two"'), ("plain text", "plain text"), ([1, 2], "[1, 2]"),
        ({"s": "a\nb"}, 's="a\\nb"'), ("word " * 30, ("word " * 16).strip() + "…"),
    ],
)
def test_short_arguments(arguments, short):
    assert ledger_panel.short_arguments(arguments) == short


def test_a_tool_without_a_policy_is_shown_and_ordered_as_an_external_effect(viewer, policies):
    # Two dispatched calls owed by the crashed turn: a tool no policy classes, then a charge.
    store([
        ("user_message", message("pay")),
        ("turn_start", {"turn": 1}),
        assistant(call("m1", "mystery_tool"), call("p1", "charge_card")),
        ("tool_call", {"id": "m1", "name": "mystery_tool"}),
        ("tool_call", {"id": "p1", "name": "charge_card"}),
    ], session_id="crashed")  # fmt: skip
    html = panel(viewer, "crashed")
    assert rows(html) == [("m1", "tool_outcome_unknown"), ("p1", "tool_outcome_unknown")]
    m1 = re.search(r'<tr [^>]*data-call="m1".*?</tr>', html, re.S)[0]
    assert "state-tool_outcome_unknown loud" in m1 and '<span class="badge se-unknown">side effects unknown</span>' in m1
    page = viewer.get("/sessions/crashed/").content.decode()
    assert 'class="card state-tool_outcome_unknown loud" id="call-' in page.split('data-call-id="m1"')[0][-300:]
    # The recovery preview ranks both as checks to make first, in the order they were sighted.
    preview = viewer.get("/sessions/crashed/recovery").content.decode()
    assert preview.count("Check this first") == 2
    assert preview.index("mystery_tool") < preview.index("charge_card")


def test_the_panel_puts_unknown_outcomes_of_unclassed_tools_before_other_calls_to_check(viewer, policies, monkeypatch):
    monkeypatch.setattr(ledger_panel, "CHECK_ROWS", 1)
    synthetic = message("unknown", tool_call_id="p1", name="charge_card", metadata={"synthetic": True, "risk": "tool_outcome_unknown"})
    store([
        ("user_message", message("pay")),
        ("turn_start", {"turn": 1}),
        assistant(call("p1", "charge_card")),
        ("tool_call", {"id": "p1", "name": "charge_card"}),
        ("tool_result", synthetic),
        answer("p1", "charge_card"),  # late: the charge reads superseded
        ("turn_end", {"turn": 1, "steps": 0, "reason": "interrupted"}),
        ("turn_start", {"turn": 2}),
        assistant(call("m1", "mystery_tool")),
        ("tool_call", {"id": "m1", "name": "mystery_tool"}),
    ], session_id="crashed")  # fmt: skip
    # Both are calls to check; with room for one, the unclassed tool's unknown outcome is the one shown.
    assert rows(panel(viewer, "crashed")) == [("m1", "tool_outcome_unknown")]
