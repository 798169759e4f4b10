"""A call's idempotency key and receipt on its card and its ledger row ("key: order-42-charge · receipt: ch_3Px"),
escaped, and kept current by a live frame as the result arrives."""

import pytest

from sessions_app import services
from sessions_app.log.events import validate_batch
from sessions_app.models import ToolPolicy
from tests.dashboard.pages.test_ledger import panel
from tests.sessions_app.log.strategies import message

pytestmark = pytest.mark.django_db

REFS = "key: <code>order-42-charge</code> · receipt: <code>ch_3Px</code>"


def charge(key: str = "order-42-charge", receipt: str = "ch_3Px") -> list[dict]:
    return [
        {"type": "assistant_message", "data": message("", tool_calls=[{"id": "p1", "name": "charge_card", "arguments": {"cents": 500}}])},
        {"type": "tool_call", "data": {"id": "p1", "name": "charge_card", "metadata": {"idempotency_key": key}}},
        {"type": "tool_result", "data": message('{"id": "%s"}' % receipt, tool_call_id="p1")},
    ]


@pytest.fixture
def pointer():
    ToolPolicy.objects.create(pattern="charge_*", side_effect=ToolPolicy.EXTERNAL_EFFECT, receipt_pointer="/id")


def page(client, session_id: str) -> str:
    response = client.get(f"/sessions/{session_id}/")
    assert response.status_code == 200
    return response.content.decode()


def test_the_card_and_the_ledger_row_show_the_key_and_the_receipt(viewer, pointer):
    services.create_session(session_id="s")
    services.append_events(session_id="s", events=validate_batch(charge()))
    html = page(viewer, "s")
    assert REFS in panel(viewer, "s")
    card = html[html.index('data-call-id="p1"') :]
    assert REFS in card[: card.index("</div>", card.index('class="card-head"') + 1) + 200]
    assert html.count(REFS) == 2


def test_a_hostile_key_is_shown_as_text(viewer, pointer):
    services.create_session(session_id="s")
    services.append_events(session_id="s", events=validate_batch(charge(key="<script>x</script>", receipt="<b>r</b>")))
    html = page(viewer, "s")
    assert "key: <code>&lt;script&gt;x&lt;/script&gt;</code> · receipt: <code>&lt;b&gt;r&lt;/b&gt;</code>" in html
    assert "<script>x</script>" not in html


def test_without_a_key_or_receipt_nothing_is_said(viewer):
    services.create_session(session_id="s")
    services.append_events(session_id="s", events=validate_batch(charge()[:1]))
    assert "call-refs" not in page(viewer, "s")


def test_a_key_that_arrives_later_changes_the_rows_version_so_a_live_frame_sends_it(pointer):
    from dashboard.pages import ledger as ledger_panel
    from sessions_app.models import Session

    services.create_session(session_id="s")
    services.append_events(session_id="s", events=validate_batch(charge()[:1]))
    before = ledger_panel.ledger_of(Session.objects.get(pk="s"), all_calls=True)
    services.append_events(session_id="s", events=validate_batch([{"type": "tool_call", "data": {"id": "p1", "name": "charge_card", "metadata": {"idempotency_key": "k-1"}}}]))
    after = ledger_panel.ledger_of(Session.objects.get(pk="s"), all_calls=True)
    assert [entry.call.state for entry in before.rows] == [entry.call.state for entry in after.rows] == ["pending"]
    assert before.order != after.order
    assert after.rows[0].row.idempotency_key == "k-1"
