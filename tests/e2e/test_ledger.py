"""The ledger panel and notes in a real browser: a crashed session's unknown external call first, read
superseded after recovery and a late real result on the card, in the ledger and on the fleet page alike, and in
a fork of the recovered session only once the fork's own late result comes; a note added in one browser
appears in another without reload, and survives export and import."""

import json
import os
import re
import time
import urllib.request
from pathlib import Path

import pytest
from playwright.sync_api import expect

from sessions_app.models import Membership, Project, Role, ToolPolicy
from tests.access import member, token_for
from tests.dashboard.pages.test_ledger import CRASH
from tests.e2e.conftest import PASSWORD, api_post, open_page
from tests.sessions_app.services.test_recovery import store

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

LIVE = 15_000  # ms


@pytest.fixture
def policies():
    ToolPolicy.objects.create(pattern="lookup_*", side_effect=ToolPolicy.READ_ONLY)
    ToolPolicy.objects.create(pattern="charge_*", side_effect=ToolPolicy.EXTERNAL_EFFECT)
    ToolPolicy.objects.create(pattern="send_email", side_effect=ToolPolicy.EXTERNAL_EFFECT)


def api_get(server, user, path):
    token = token_for(user, Membership.objects.get(user=user, project=Project.default()).role)
    request = urllib.request.Request(f"{server.url}{path}", headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def test_a_crashed_sessions_unknown_external_call_comes_first_then_reads_superseded(browser, server, staff_user, policies):
    store(CRASH, session_id="crashed")  # stalled since January: charge_card's outcome is unknown
    page = open_page(browser, server, staff_user, "/sessions/crashed/")
    rows = page.locator("#ledger-panel tr.ledger-row")
    expect(rows).to_have_count(2)
    expect(rows.first).to_have_attribute("data-call", "p1")
    expect(rows.first).to_have_attribute("data-state", "tool_outcome_unknown")
    expect(rows.first.locator(".badge.state")).to_have_text("tool_outcome_unknown")
    card = page.locator('.card[data-call-id="p1"]')
    expect(card).to_have_attribute("data-state", "tool_outcome_unknown")
    rows.first.locator("a.tool-name").click()  # the ledger links to the card
    expect(page).to_have_url(re.compile(r"#call-[0-9a-f]+$"))
    expect(card).to_be_in_viewport()

    page.goto(f"{server.url}/sessions/crashed/recovery")
    page.get_by_role("button", name="Confirm recovery").click()
    page.wait_for_url(re.compile(r".*/sessions/crashed/\?highlight=.*"))
    expect(page.locator("#live-state")).to_have_attribute("data-state", "open", timeout=LIVE)
    expect(card).to_have_attribute("data-state", "tool_outcome_unknown")
    expect(page.locator('#ledger-panel [data-call="p1"]')).to_have_attribute("data-state", "tool_outcome_unknown")
    status, body = api_post(server, staff_user, "/api/v1/sessions/crashed/fork", {"id": "retry"})  # a retry of the recovered run
    assert status == 201, body
    late_result(server, staff_user, "crashed")
    # Without reload: the card and the ledger read the late real result as superseding recovery's.
    expect(card).to_have_attribute("data-state", "superseded", timeout=LIVE)
    expect(page.locator('#ledger-panel [data-call="p1"]')).to_have_attribute("data-state", "superseded", timeout=LIVE)
    calls = api_get(server, staff_user, "/api/v1/sessions/crashed/calls")["calls"]
    assert {c["call_id"]: c["state"] for c in calls} == {"e1": "completed", "p1": "superseded"}
    page.goto(f"{server.url}/calls/")  # the fleet says the same word
    expect(page.locator("#call-crashed--p1")).to_contain_text("superseded")

    # The fork inherited p1 before that result: its ledger still reads the unknown outcome, until its own late result.
    page.goto(f"{server.url}/sessions/retry/")
    fork_row = page.locator('#ledger-panel [data-call="p1"]')
    expect(fork_row).to_have_attribute("data-state", "tool_outcome_unknown")
    expect(page.locator("#live-state")).to_have_attribute("data-state", "open", timeout=LIVE)
    late_result(server, staff_user, "retry")
    expect(fork_row).to_have_attribute("data-state", "superseded", timeout=LIVE)
    expect(page.locator('.card[data-call-id="p1"]')).to_have_attribute("data-state", "superseded", timeout=LIVE)
    page.goto(f"{server.url}/calls/")  # the fork's own row of the call it inherited
    expect(page.locator("#call-retry--p1")).to_contain_text("superseded")
    expect(page.locator("#call-crashed--p1")).to_contain_text("superseded")


def late_result(server, user, session_id: str) -> None:
    status, body = api_post(server, user, f"/api/v1/sessions/{session_id}/events", {"events": [
        {"type": "tool_result", "data": {"tool_call_id": "p1", "content": "charged after all"}},
    ]})  # fmt: skip
    assert status == 201, body


def test_a_note_added_in_one_browser_appears_in_another_and_survives_export_and_import(browser, server, plain_user, django_user_model, policies):
    store(CRASH, session_id="crashed")
    other = django_user_model.objects.create_user("second", password=PASSWORD)
    member(other, Role.VIEWER)
    writer = open_page(browser, server, plain_user, "/sessions/crashed/")
    reader = open_page(browser, server, other, "/sessions/crashed/")
    for page in (writer, reader):
        expect(page.locator("#live-state")).to_have_attribute("data-state", "open", timeout=LIVE)
    expect(reader.locator(".add-note")).to_have_count(0)  # a viewer gets no form

    card = writer.locator('.card[data-call-id="p1"]')
    card.locator("details.add-note > summary").click()
    card.locator("textarea[name=text]").fill("called billing: the charge went through")
    card.locator("input[name=tags]").fill("verified refund-confirmed")
    card.get_by_role("button", name="Add note").click()

    for page in (reader, writer):  # no reload
        expect(page.locator('.card[data-call-id="p1"] .note-item')).to_contain_text("called billing: the charge went through", timeout=LIVE)
        expect(page.locator('#ledger-panel [data-call="p1"]')).to_contain_text("called billing", timeout=LIVE)
    expect(card.locator("textarea[name=text]")).to_have_value("")  # the form emptied itself
    expect(reader.locator('.card[data-call-id="p1"] .note-item .badge.tag')).to_have_text(["verified", "refund-confirmed"])

    blob = api_get(server, plain_user, "/api/v1/sessions/crashed/export")
    assert [n["text"] for n in blob["notes"]] == ["called billing: the charge went through"]
    status, body = api_post(server, plain_user, "/api/v1/sessions/import?id=imported", blob)
    assert status == 201, body
    reader.goto(f"{server.url}/sessions/imported/")
    imported = reader.locator('.card[data-call-id="p1"] .note-item')
    expect(imported).to_contain_text("called billing: the charge went through")
    expect(imported).to_contain_text("viewer")  # the author, kept as text


def test_a_demo_sessions_ledger_matches_its_cards(browser, server, staff_user):
    """The demo's crashed sessions (manage.py seed_demo): each ledger row reads as its card; with
    TURNLOG_SCREENSHOTS set (docs/images), the screenshots of the ledger panel and of a crashed session are taken here."""
    from django.core.management import call_command

    from sessions_app import selectors, services
    from sessions_app.models import Session
    from sessions_app.selectors import access

    call_command("seed_demo", stdout=open(os.devnull, "w"))
    crashed = [s for s in Session.objects.order_by("created_at") if selectors.get_session(s.id).status == selectors.STALLED]
    chosen = next(s for s in crashed if any(r.call.state == "tool_outcome_unknown" for r in selectors.session_calls(s, all_classes=False)))
    first_call = selectors.session_calls(chosen, all_classes=False)[0]
    services.add_note(
        actor=access.Actor(user=staff_user), session_id=chosen.id, text="Checked with the customer: the receipt arrived.",
        tags=["verified", "needs-follow-up"], seq=first_call.call.seq,
    )  # fmt: skip
    page = open_page(browser, server, staff_user, f"/sessions/{chosen.id}/")
    rows = page.locator("#ledger-panel tr.ledger-row")
    expect(rows.first).to_have_class(re.compile(r"\bloud\b"))  # an unknown outcome of an external effect, first
    for row in rows.all():
        card = page.locator(f'.card[data-call-id="{row.get_attribute("data-call")}"]')
        if card.count():
            expect(card).to_have_attribute("data-state", row.get_attribute("data-state"))
    if os.environ.get("TURNLOG_SCREENSHOTS"):
        shots = Path(os.environ["TURNLOG_SCREENSHOTS"])
        page.locator("#ledger-panel").screenshot(path=str(shots / "screenshot-ledger.png"))
        # The README's screenshot: the crashed turn around its unknown-outcome card.
        page.locator('.card[data-state="tool_outcome_unknown"]').first.scroll_into_view_if_needed()
        page.screenshot(path=str(shots / "screenshot-session.png"))


def ledger_rows(page) -> tuple[list[str], list[str]]:
    """(the rows #ledger-order lists, the rows the panel holds), each as id:version."""
    return page.evaluate("""() => [
      (document.getElementById("ledger-order").getAttribute("data-rows") || "").split(" ").filter(Boolean),
      [...document.querySelectorAll("#ledger-rows > tr")].map((row) => row.id + ":" + row.getAttribute("data-version")),
    ]""")


def test_ledger_rows_fetched_while_another_fetch_is_under_way_are_put_in_order(browser, server, plain_user):
    """A note changes its row's version: the page fetches the row. A fetch asked while another is under way waits
    behind it (htmx resolves its promise at once): its rows are put in the panel's order too when they come."""
    calls = [(f"c{n}", n * 2) for n in range(5)]  # (call id, the seq of its call)
    store([e for cid, _ in calls for e in (
        ("assistant_message", {"content": "", "tool_calls": [{"id": cid, "name": "lookup_order"}]}),
        ("tool_result", {"tool_call_id": cid, "content": "ok"}),
    )], session_id="ordered")  # fmt: skip
    page = open_page(browser, server, plain_user, "/sessions/ordered/")
    expect(page.locator("#live-state")).to_have_attribute("data-state", "open", timeout=LIVE)
    held, released = [], []
    # The first fetch of rows is kept under way until released.
    page.route("**/sessions/ordered/ledger?*", lambda route: route.continue_() if released else held.append(route))

    for text, (cid, seq) in (("first", calls[1]), ("second", calls[3])):
        status, body = api_post(server, plain_user, "/api/v1/sessions/ordered/notes", {"text": text, "seq": seq})
        assert status == 201, body
        expect(page.locator(f'.card[data-call-id="{cid}"] .note-item')).to_contain_text(text, timeout=LIVE)
    assert len(held) == 1  # the second fetch waits behind the first
    released.append(True)
    held[0].continue_()
    deadline = time.monotonic() + 10
    while (rows := ledger_rows(page))[0] != rows[1]:
        assert time.monotonic() < deadline, f"the panel holds {rows[1]}, not {rows[0]} (#ledger-order)"
        page.wait_for_timeout(100)
    expect(page.locator('#ledger-panel [data-call="c3"]')).to_contain_text("second")
