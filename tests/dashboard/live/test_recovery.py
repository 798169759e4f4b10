"""The recovery preview while the log moves: its live banner (dashboard.live.recovery) and a stale confirm."""

from __future__ import annotations

import re

import pytest
from channels.db import database_sync_to_async

from sessions_app import selectors, services
from sessions_app.log.events import validate_batch
from sessions_app.models import Event, RecoveryRecord, Role, Session
from tests.access import member
from tests.dashboard.conftest import QUIET, WAIT
from tests.dashboard.live.test_sessions import append_events, browser_socket, closed_with
from tests.dashboard.pages.test_sessions import staff, text_of  # noqa: F401  (fixture)
from tests.sessions_app.log.strategies import message
from tests.sessions_app.log.test_recovery import WORKED_EXAMPLE, assistant, result
from tests.sessions_app.services.test_recovery import store

LIVE = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio, pytest.mark.usefixtures("slow_poll", "fresh_layer")]
# The agent comes back inside turn 1: c3 answered, step 2 closed, step 3 begun (the turn stays open).
COMES_BACK = [
    {"type": "tool_result", "data": result("c3")[1]},
    {"type": "step_end", "data": {"turn": 1, "step": 2, "outcome": "ok"}},
    {"type": "step_start", "data": {"turn": 1, "step": 3}},
]
CLOSES = [{"type": "turn_end", "data": {"turn": 1, "steps": 3, "reason": "complete"}}]


def shown_plan(page: str) -> dict:
    """The plan the page's confirm form was made from: its digest and next_seq."""
    form = page[page.index('<form method="post" class="confirm"') :]
    return {name: re.search(rf'name="{name}" value="([^"]*)"', form).group(1) for name in ("digest", "next_seq")}


def banner(html: str) -> str:
    """The words of the #plan-change element in a page or frame, tags and spacing aside."""
    element = html[html.index('<div id="plan-change"') :]
    element = element[: element.index("</p>")]
    return " ".join(re.sub(r"<[^>]+>", " ", element[element.index(">") + 1 :]).split())


def append(session_id: str, events: list[dict]) -> None:
    services.append_events(session_id=session_id, events=validate_batch(events))


@pytest.mark.django_db
def test_a_stale_confirm_keeps_the_choices_and_says_which_events_arrived(staff):  # noqa: F811
    store(WORKED_EXAMPLE, session_id="crashed")
    shown = shown_plan(text_of(staff.get("/sessions/crashed/recovery")))
    assert shown["next_seq"] == "10"
    append("crashed", COMES_BACK)
    response = staff.post("/sessions/crashed/recovery", {**shown, "abandon": "1", "context": "1", "note": "checked the charge"})
    page = text_of(response)
    assert response.status_code == 409 and Event.objects.count() == 13 and not RecoveryRecord.objects.exists()
    assert banner(page) == "Nothing was appended: 3 events arrived since you opened the preview: seqs 10–12."
    assert "with your choices kept: review it again" in page
    assert '<input type="radio" name="abandon" value="1" checked>' in page
    assert '<input type="radio" name="abandon" value="">' in page  # no longer the checked one
    assert re.search(r'name="context" value="1" checked', page)
    assert '<textarea id="note" name="note" rows="2">checked the charge</textarea>' in page
    fresh = shown_plan(page)  # the form now carries the fresh plan, and confirming it works
    assert fresh == {"next_seq": "13", "digest": selectors.recovery_plan(Session.objects.get()).digest(13)}
    assert staff.post("/sessions/crashed/recovery", {**fresh, "abandon": "1", "note": "checked the charge"}).status_code == 302
    record = RecoveryRecord.objects.get()
    assert record.abandoned and record.note == "checked the charge" and record.first_seq == 13


@pytest.mark.django_db
def test_a_stale_confirm_after_the_turn_closed_says_so_and_keeps_the_note_in_words(staff):  # noqa: F811
    store(WORKED_EXAMPLE, session_id="crashed")
    shown = shown_plan(text_of(staff.get("/sessions/crashed/recovery")))
    append("crashed", [{"type": "tool_result", "data": result(c)[1]} for c in ("c3", "c2")])  # nothing left dangling
    append("crashed", CLOSES)
    page = text_of(staff.post("/sessions/crashed/recovery", {**shown, "note": "a <b>note</b>"}))
    assert banner(page) == (
        "Nothing was appended: the turn closed, so there is nothing to recover any more."
        " 3 events arrived since you opened the preview: seqs 10–12."
    )
    assert "Your note, not recorded: “a &lt;b&gt;note&lt;/b&gt;”" in page and "No open turn" in page
    assert 'name="note"' not in page  # no form left to keep it in


@pytest.mark.django_db
def test_a_stale_confirm_without_the_plans_length_still_refuses_in_words(staff):  # noqa: F811
    store(WORKED_EXAMPLE, session_id="crashed")
    digest = shown_plan(text_of(staff.get("/sessions/crashed/recovery")))["digest"]
    append("crashed", COMES_BACK)
    for next_seq in ({}, {"next_seq": "abc"}, {"next_seq": "9" * 5000}, {"next_seq": "99"}):
        response = staff.post("/sessions/crashed/recovery", {"digest": digest, "note": "kept", **next_seq})
        assert response.status_code == 409, next_seq
        assert banner(text_of(response)) == "Nothing was appended: it is not the plan you opened the preview with."
        assert ">kept</textarea>" in text_of(response)
    assert Event.objects.count() == 13


@pytest.mark.django_db
def test_a_stale_dangling_call_patch_keeps_its_note_and_counts_the_events(staff):  # noqa: F811
    store([("user_message", message("go")), assistant("c1")], session_id="dangling")
    page = text_of(staff.get("/sessions/dangling/recovery"))
    form = page[page.index('<section aria-labelledby="dangling"') :]
    shown = {name: re.search(rf'name="{name}" value="([^"]*)"', form).group(1) for name in ("digest", "next_seq")}
    append("dangling", [{"type": "user_message", "data": {"content": "back"}}])
    response = staff.post("/sessions/dangling/recovery", {**shown, "action": "patch", "note": "patched by hand"})
    page = text_of(response)
    assert response.status_code == 409 and Event.objects.count() == 3
    assert banner(page) == "Nothing was appended: 1 event arrived since you opened the preview: seq 2."
    assert "with your choices kept" in page and 'name="note" value="patched by hand"' in page


@pytest.mark.django_db
def test_the_preview_keeps_choices_sent_along_and_shows_no_banner_for_its_own_plan(staff):  # noqa: F811
    """"Show the new plan" GETs the page with the person's choices: they come back filled in."""
    store(WORKED_EXAMPLE, session_id="crashed")
    page = text_of(staff.get("/sessions/crashed/recovery", {"abandon": "1", "context": "1", "note": "half typed"}))
    assert '<div id="plan-change">\n\n</div>' in page  # the banner's place, empty: this is the plan
    assert 'name="abandon" value="1" checked' in page and ">half typed</textarea>" in page
    assert 'ws-connect="/ws/sessions/crashed/recovery/live?next_seq=10&amp;digest=' in page


A_DIGEST = "digest=" + "a" * 64


@pytest.mark.parametrize(
    "query", ["", "next_seq=10", A_DIGEST, f"next_seq=x&{A_DIGEST}", "next_seq=10&digest=short", f"next_seq={'9' * 5000}&{A_DIGEST}"]
)
@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
@pytest.mark.usefixtures("slow_poll", "fresh_layer")
async def test_a_recovery_socket_without_a_plan_is_closed_4400(sid, session_cookie, query):
    await database_sync_to_async(store)(WORKED_EXAMPLE, session_id=sid)
    assert await closed_with(await browser_socket(f"/ws/sessions/{sid}/recovery/live?{query}", session_cookie)) == 4400


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
@pytest.mark.usefixtures("slow_poll", "fresh_layer")
async def test_a_recovery_socket_needs_a_login_an_allowed_origin_and_a_readable_session(sid, session_cookie):
    await database_sync_to_async(store)(WORKED_EXAMPLE, session_id=sid)
    plan = f"next_seq=10&digest={'a' * 64}"
    assert await closed_with(await browser_socket(f"/ws/sessions/{sid}/recovery/live?{plan}", None)) == 4401
    assert await closed_with(await browser_socket(f"/ws/sessions/{sid}/recovery/live?{plan}", session_cookie, "https://evil.test")) == 4403
    assert await closed_with(await browser_socket(f"/ws/sessions/nope/recovery/live?{plan}", session_cookie)) == 4404


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
@pytest.mark.usefixtures("slow_poll", "fresh_layer")
async def test_the_recovery_page_gets_a_banner_when_events_are_appended(sid, session_cookie, client, user):
    await database_sync_to_async(store)(WORKED_EXAMPLE, session_id=sid)
    await database_sync_to_async(client.force_login)(user)
    page = text_of(await database_sync_to_async(client.get)(f"/sessions/{sid}/recovery"))
    socket_path = re.search(r'ws-connect="([^"]+)"', page).group(1).replace("&amp;", "&")
    shown = dict(re.findall(r"(next_seq|digest)=([^&]+)", socket_path))
    socket = await browser_socket(socket_path, session_cookie)
    assert await socket.receive_nothing(QUIET)  # nothing changed yet

    await append_events(sid, COMES_BACK)
    frame = await socket.receive_from(timeout=WAIT)
    assert frame.startswith('<div id="plan-change" hx-swap-oob="true">')
    assert banner(frame) == "The plan changed: 3 events arrived since you opened the preview: seqs 10–12."
    assert "Show the new plan" in frame and 'hx-include="#recovery-choices, #patch-choices"' in frame
    assert frame.endswith('<span id="live-cursor" data-last-seq="12" hidden hx-swap-oob="true"></span>')
    # The stale confirm of the same plan says the same about the same events.
    await database_sync_to_async(member)(user, Role.OPERATOR)
    stale = text_of(await database_sync_to_async(client.post)(f"/sessions/{sid}/recovery", shown))
    assert banner(stale).split(": ", 1)[1] == banner(frame).split(": ", 1)[1]

    await append_events(sid, CLOSES)
    frame = await socket.receive_from(timeout=WAIT)
    assert banner(frame) == "Nothing to recover any more: the turn closed. 4 events arrived since you opened the preview: seqs 10–13."
    assert "Show the session as it is now" in frame
    assert await socket.receive_nothing(QUIET)


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
@pytest.mark.usefixtures("slow_poll", "fresh_layer")
async def test_the_banner_names_who_recovered_the_session_meanwhile(sid, session_cookie, user):
    session = await database_sync_to_async(store)(WORKED_EXAMPLE, session_id=sid)
    digest = await database_sync_to_async(lambda: selectors.recovery_plan(session).digest(10))()
    socket = await browser_socket(f"/ws/sessions/{sid}/recovery/live?next_seq=10&digest={digest}&after=9", session_cookie)
    await database_sync_to_async(services.recover)(session_id=sid, user=user)
    frame = await socket.receive_from(timeout=WAIT)
    assert banner(frame) == "Nothing to recover any more: viewer recovered it. 3 events arrived since you opened the preview: seqs 10–12."
