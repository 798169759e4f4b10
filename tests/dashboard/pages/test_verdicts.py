"""Verdicts on the pages: the card, the ledger panel and /calls/ say what was found; the card's form records and withdraws."""

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from sessions_app import services
from sessions_app.log.events import validate_batch
from sessions_app.models import AuditEntry, LedgerCall, Session, Verdict
from sessions_app.selectors import access
from sessions_app.services.verdicts import record_verdict, withdraw_verdict

pytestmark = pytest.mark.django_db

CRASH = [
    {"type": "turn_start", "data": {"turn": 1}},
    {"type": "assistant_message", "data": {"content": "", "tool_calls": [{"id": "w1", "name": "send_wire", "arguments": {"cents": 500}}]}},
    {"type": "tool_call", "data": {"id": "w1", "name": "send_wire"}},
]


def crashed(session_id: str = "s1") -> None:
    services.create_session(session_id=session_id, agent_name="billing-bot")
    services.append_events(session_id=session_id, events=validate_batch(CRASH))
    hour_ago = timezone.now() - timedelta(hours=1)
    Session.objects.filter(pk=session_id).update(last_activity_at=hour_ago, last_received_at=hour_ago)
    LedgerCall.objects.filter(session_id=session_id).update(sighted_at=hour_ago)


def settle(user, session_id: str = "s1", outcome: str = "not_happened", evidence: str = "bank portal, no wire", ref=None):
    return record_verdict(actor=access.Actor(user=user), session_id=session_id, call_id="w1", outcome=outcome, evidence=evidence, external_ref=ref)


def text(html: str) -> str:
    """The page's words, tags dropped and spaces folded (as a reader reads them)."""
    return " ".join(re.sub(r"<[^>]+>", " ", html).replace(" ,", ",").split()).replace(" )", ")").replace("( ", "(").replace(" :", ":").replace(" ;", ";")


def card_of(html: str) -> str:
    return re.search(r'<div class="card state-[^"]*" id="call-[^"]+" data-call-id="w1".*?\n</div>', html, re.S).group(0)


def call_rows(html: str) -> list[str]:
    return re.findall(r'<tr id="call-([^"]+)"', html)


@pytest.fixture
def vera(django_user_model):
    from sessions_app.models import Role
    from tests.access import member

    user = django_user_model.objects.create_user("vera", is_staff=True)
    member(user, Role.OPERATOR)
    return user


def test_a_settled_call_reads_its_state_then_the_verdict_on_the_card_the_ledger_and_the_calls_page(operator, vera):
    crashed()
    settle(vera, ref="none-found")
    page = operator.get("/sessions/s1/").content.decode()
    card = card_of(page)
    assert "tool_outcome_unknown, verified not happened (vera: bank portal, no wire; ref none-found)" in text(card)
    assert "settled" in card.split(">", 1)[0] and " loud" not in card.split(">", 1)[0]  # calm, not the red "check" look
    ledger = re.search(r'<tr id="ledger-[^"]+" class="ledger-row[^"]*".*?</tr>', page, re.S).group(0)
    assert "settled" in ledger.split(">", 1)[0]
    assert "tool_outcome_unknown, verified not happened (vera: bank portal, no wire; ref none-found)" in text(ledger)
    settled = operator.get("/calls/?settled=true").content.decode()
    assert call_rows(settled) == ["s1--w1"]
    assert "tool_outcome_unknown, verified not happened (vera: bank portal, no wire; ref none-found)" in text(settled)


def test_the_reference_is_left_out_when_there_is_none_and_happened_reads_so(operator, vera):
    crashed()
    settle(vera, outcome="happened", evidence="found it in the ledger")
    card = text(card_of(operator.get("/sessions/s1/").content.decode()))
    assert "tool_outcome_unknown, verified happened (vera: found it in the ledger)" in card and "ref" not in card.split("verified happened")[1][:60]


def test_calls_page_lists_only_unsettled_calls_by_default_and_the_filter_shows_settled_or_both(operator, vera):
    crashed("s1")
    crashed("s2")
    settle(vera, "s1")
    assert call_rows(operator.get("/calls/").content.decode()) == ["s2--w1"]
    assert call_rows(operator.get("/calls/?settled=true").content.decode()) == ["s1--w1"]
    assert sorted(call_rows(operator.get("/calls/?settled=any").content.decode())) == ["s1--w1", "s2--w1"]
    page = operator.get("/calls/?settled=true").content.decode()
    assert '<option value="true" selected>Settled</option>' in page and "Settled calls" in page
    withdraw_verdict(actor=access.Actor(user=vera), session_id="s1", call_id="w1")
    assert sorted(call_rows(operator.get("/calls/").content.decode())) == ["s1--w1", "s2--w1"]


def test_an_unusable_settled_filter_is_said_and_the_calls_to_check_are_listed(operator):
    crashed()
    page = operator.get("/calls/?settled=maybe").content.decode()
    assert "Ignored the filter settled &#x27;maybe&#x27;" in page and call_rows(page) == ["s1--w1"]


def test_an_operator_records_a_verdict_from_the_card_and_gets_the_card_back(operator):
    crashed()
    form = operator.get("/sessions/s1/").content.decode()
    assert 'name="outcome" value="happened"' in card_of(form) and 'name="evidence"' in card_of(form)
    answer = operator.post(
        "/sessions/s1/verdict", {"call_id": "w1", "action": "record", "outcome": "happened", "evidence": "charge ch_1 in Stripe", "external_ref": "ch_1"},
        headers={"HX-Request": "true"},
    )
    assert answer.status_code == 200
    card = answer.content.decode().strip()
    assert card.startswith('<div class="card state-tool_outcome_unknown') and "<html" not in card
    assert "tool_outcome_unknown, verified happened (ops: charge ch_1 in Stripe; ref ch_1)" in text(card)
    assert "Withdraw" in card and "Replace the verdict" in card
    verdict = Verdict.objects.get()
    assert (verdict.outcome, verdict.by, verdict.source) == ("happened", "ops", "person")
    assert LedgerCall.objects.get(call_id="w1").verdict == "happened"


def test_withdrawing_from_the_card_keeps_the_history_struck_through_with_who_and_when(operator, vera):
    crashed()
    settle(vera)
    answer = operator.post("/sessions/s1/verdict", {"call_id": "w1", "action": "withdraw", "reason": "wrong account"}, headers={"HX-Request": "true"})
    card = answer.content.decode()
    assert answer.status_code == 200 and "verified not happened (vera" not in text(card).split("Verdicts (1)")[0]
    history = re.search(r'<details class="verdict-history">.*?</details>', card, re.S).group(0)
    assert '<li class="withdrawn">' in history and "withdrawn by ops" in text(history) and "“wrong account”" in history
    assert LedgerCall.objects.get(call_id="w1").verdict is None
    assert AuditEntry.objects.filter(action=AuditEntry.VERDICT_WITHDRAWN).count() == 1


@pytest.mark.parametrize(
    "form, field",
    [
        ({"outcome": "happened", "evidence": "   "}, "evidence"),
        ({"outcome": "happened", "evidence": "x" * 4001}, "evidence"),
        ({"outcome": "maybe", "evidence": "seen"}, "outcome"),
        ({"evidence": "seen"}, "outcome"),
        ({"outcome": "happened", "evidence": "seen", "external_ref": "r" * 501}, "external_ref"),
    ],
)
def test_bad_input_shows_the_error_beside_its_field_and_stores_nothing(operator, form, field):
    crashed()
    answer = operator.post("/sessions/s1/verdict", {"call_id": "w1", "action": "record", **form}, headers={"HX-Request": "true"})
    assert answer.status_code == 200  # htmx swaps only 2xx: the card again, with the reason
    card = answer.content.decode()
    assert f'<p class="error" role="alert" data-field="{field}">' in card
    assert '<details class="verdict-record" open>' in card
    assert not Verdict.objects.exists() and LedgerCall.objects.get(call_id="w1").verdict is None
    without_htmx = operator.post("/sessions/s1/verdict", {"call_id": "w1", "action": "record", **form})
    assert without_htmx.status_code == 422 and not Verdict.objects.exists()


def test_what_was_typed_stays_in_the_refused_form(operator):
    crashed()
    card = operator.post(
        "/sessions/s1/verdict", {"call_id": "w1", "action": "record", "outcome": "not_happened", "evidence": "", "external_ref": "<ref>"},
        headers={"HX-Request": "true"},
    ).content.decode()
    assert 'value="not_happened" checked' in card and 'value="&lt;ref&gt;"' in card


def test_withdrawing_when_there_is_no_verdict_says_so_on_the_card(operator):
    crashed()
    card = operator.post("/sessions/s1/verdict", {"call_id": "w1", "action": "withdraw"}, headers={"HX-Request": "true"}).content.decode()
    assert 'data-field="action"' in card and "has no current verdict" in card


def test_an_unknown_call_or_session_is_a_404(operator):
    crashed()
    assert operator.post("/sessions/s1/verdict", {"call_id": "nope", "outcome": "happened", "evidence": "x"}).status_code == 404
    assert operator.post("/sessions/ghost/verdict", {"call_id": "w1", "outcome": "happened", "evidence": "x"}).status_code == 404


def test_a_member_sees_the_verdict_but_no_form_and_is_refused_a_post(viewer, vera):
    crashed()
    page = viewer.get("/sessions/s1/").content.decode()
    assert 'name="outcome"' not in page and "/sessions/s1/verdict" not in page
    settle(vera)
    card = card_of(viewer.get("/sessions/s1/").content.decode())
    assert "verified not happened (vera: bank portal, no wire)" in text(card) and "Withdraw" not in card
    answer = viewer.post("/sessions/s1/verdict", {"call_id": "w1", "action": "withdraw"})
    assert answer.status_code == 403
    assert viewer.post("/sessions/s1/verdict", {"call_id": "w1", "outcome": "happened", "evidence": "x"}).status_code == 403
    assert Verdict.objects.get().withdrawn_at is None


def test_a_settled_call_is_not_the_ledgers_first_to_check(operator, vera):
    crashed()
    services.append_events(
        session_id="s1",
        events=validate_batch([{"type": "assistant_message", "data": {"content": "", "tool_calls": [{"id": "w2", "name": "send_wire", "arguments": {}}]}}]),
    )
    settle(vera)
    page = operator.get("/sessions/s1/").content.decode()
    assert re.findall(r'<tr id="ledger-[^"]+" class="ledger-row[^"]*" data-call="([^"]+)"', page) == ["w2", "w1"]


def test_the_header_and_the_list_row_say_when_every_unknown_call_is_settled(operator, vera):
    crashed("s1")
    crashed("s2")
    services.append_events(
        session_id="s1",
        events=validate_batch([
            {"type": "assistant_message", "data": {"content": "", "tool_calls": [{"id": "w2", "name": "send_wire", "arguments": {}}]}},
            {"type": "tool_call", "data": {"id": "w2", "name": "send_wire"}},
        ]),
    )  # fmt: skip
    Session.objects.filter(pk="s1").update(last_activity_at=timezone.now() - timedelta(hours=1), last_received_at=timezone.now() - timedelta(hours=1))
    settle(vera, "s1")
    assert "all unknown calls settled" not in operator.get("/sessions/s1/").content.decode()  # w2 is still unknown
    record_verdict(actor=access.Actor(user=vera), session_id="s1", call_id="w2", outcome="happened", evidence="sent")
    header = re.search(r'<header class="session-head".*?</header>', operator.get("/sessions/s1/").content.decode(), re.S).group(0)
    assert "all unknown calls settled" in header and "stalled" in header  # its status is kept
    listing = operator.get("/").content.decode()
    row = lambda sid: re.search(rf'<tr id="session-{sid}".*?</tr>', listing, re.S).group(0)  # noqa: E731
    assert "all unknown calls settled" in row("s1") and "all unknown calls settled" not in row("s2")
    assert "all unknown calls settled" not in operator.get("/sessions/s2/").content.decode()
