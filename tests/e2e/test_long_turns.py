"""Long turns in a browser: a turn growing past many pages live reads as a reload; page stubs open in place and
show a run as one gap; a link to an event on a page not shown (or in earlier turns) reaches it.

A turn is cut into pages of 40 seqs (dashboard.pages.transcript): a page load shows its first page and its
last two, the others as stubs. Live frames carry what changed (dashboard.live.frames), in websocket messages
of at most 64 KiB. On SQLite one Daphne serves the page and takes the writes; on PostgreSQL the page is served
by one Daphne and the writes go through another, the two joined by Redis.
"""

from __future__ import annotations

import itertools

import pytest
from playwright.sync_api import expect

from dashboard.pages.transcript import TURN_PAGE
from sessions_app import services
from sessions_app.log.events import validate_batch
from tests.e2e.conftest import PASSWORD, api_post
from tests.e2e.test_live_equals_reload import LIVE, Pages, live_servers

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

MESSAGE_BYTES = 64 * 1024  # the most a page's socket is sent in one message
BIG = 1_100_000  # characters of one user message: cut to a preview and a link everywhere
BIG_END = "END-OF-THE-WHOLE-VALUE"
BIG_VALUE = ("lorem ipsum dolor sit amet " * (BIG // 27 + 1))[: BIG - len(BIG_END)] + BIG_END


class Log:
    """A session's events as the test appends them: each event's seq is known before it is written."""

    def __init__(self, sid: str):
        self.sid, self.next_seq = sid, 0
        self.calls = itertools.count(1)

    def step(self, *, answered: bool = True, name: str = "lookup") -> list[tuple[str, dict]]:
        """A tool-call step: step_start, the assistant's call, its dispatch, its result (when answered), step_end."""
        n = next(self.calls)
        cid = f"c{n}"
        events = [
            ("step_start", {"step": n}),
            ("assistant_message", {"content": "", "tool_calls": [{"id": cid, "name": name, "arguments": {"n": n}}]}),
            ("tool_call", {"id": cid, "name": name}),
        ]  # fmt: skip
        if answered:
            events.append(("tool_result", {"tool_call_id": cid, "content": f"answer {n}"}))
        return [*events, ("step_end", {"step": n, "outcome": "ok"})]

    def steps(self, count: int) -> list[tuple[str, dict]]:
        return [event for n in range(count) for event in self.step(name="charge_card" if n % 3 == 0 else "lookup")]

    @staticmethod
    def thinking(count: int) -> list[tuple[str, dict]]:
        return [("assistant_message", {"content": f"thinking {n}"}) for n in range(count)]

    def wrote(self, count: int) -> int:
        """The seq of the last of `count` events just written."""
        self.next_seq += count
        return self.next_seq - 1


# A live long turn ---------------------------------------------------------------------------------------


@pytest.fixture
def servers(transactional_db, tmp_path):
    """As test_live_equals_reload's, with a stall far off: the open turn stays running through the test."""
    with live_servers(tmp_path, TURNLOG_STALL_SECONDS="600", TURNLOG_PAGE_REFRESH_SECONDS="0.5") as both:
        yield both


def test_a_long_open_turn_growing_live_reads_as_a_reload_after_every_append(browser, servers, staff_user):
    """465 events of one turn, appended one at a time across page ends and in batches of about 100, with a user message
    of 1,100,000 characters among them: after each append the open page reads as a fresh load, the large value cut
    live as on a reload, every websocket message under 64 KiB."""
    pages_server, writes_server = servers
    log = Log("long-live")
    status, body = api_post(writes_server, staff_user, "/api/v1/sessions", {"id": log.sid, "agent_name": "long-agent"})
    assert status == 201, body

    def append(events: list[tuple[str, dict]]) -> int:
        status, body = api_post(writes_server, staff_user, f"/api/v1/sessions/{log.sid}/events", {"events": [{"type": t, "data": d} for t, d in events]})
        assert status == 201, body
        return log.wrote(len(events))

    def singly(step: str, events: list[tuple[str, dict]]) -> None:
        for number, event in enumerate(events):
            pages.compare(f"{step}, event {number + 1} of {len(events)} alone", append([event]))

    append([("user_message", {"content": "go"}), ("turn_start", {"turn": 1})])  # the turn opens at seq 1: its page 0 is seqs 1 to 40
    pages = Pages(browser, pages_server, staff_user, sid=log.sid, queries=("",))
    page = pages.transcript
    singly("a step whose call stays unanswered", log.step(answered=False))  # c1, on page 0: answered much later
    pages.compare("a batch of 100", append(log.steps(20)))
    pages.compare("a batch up to a page's end", append(log.steps(2) + log.thinking(3)))  # through seq 118
    # A step from page 2 into page 3 (seq 121): page 1 leaves the shown tail, the step continues on the new page.
    singly("a step across a page's end", log.step())

    big_seq = append([("user_message", {"content": BIG_VALUE})])
    pages.compare("a user message of 1,100,000 characters", big_seq)
    pages.check("the large value, live", lambda: shows_the_value_cut(page, big_seq))
    reloaded = pages.context.new_page()
    reloaded.goto(f"{pages_server.url}/sessions/{log.sid}/")
    pages.check("the large value, reloaded", lambda: shows_the_value_cut(reloaded, big_seq))
    reloaded.close()

    pages.compare("a batch of 100 that stubs pages", append(log.steps(20)))
    late = [("tool_result", {"tool_call_id": "c1", "content": "answered at last"})]
    pages.compare("a batch of 100 with a late result for page 0's card", append(late + log.steps(19) + log.thinking(4)))
    pages.check("a late result", lambda: expect(page.locator('#page-1-0 [data-call-id="c1"]')).to_have_attribute("data-state", "completed"))
    pages.compare("a batch up to a page's end", append(log.steps(6) + log.thinking(4)))  # through seq 358
    singly("a step across a page's end", log.step())
    pages.compare("another batch of 100", append(log.steps(20)))
    pages.check("a long turn", lambda: expect(page.locator("#turn-1 .page-stub")).to_have_count((log.next_seq - 2) // TURN_PAGE + 1 - 3))
    pages.compare("the turn's end", append([("turn_end", {"turn": 1, "reason": "complete"})]))

    assert log.next_seq > 400
    sizes = [len(m.encode() if isinstance(m, str) else m) for m in pages.messages]
    assert sizes and max(sizes) <= MESSAGE_BYTES, f"messages of {sorted(sizes)[-3:]} bytes"
    assert not [m for m in pages.messages if BIG_END in str(m)], "a frame carried the whole large value"
    assert not pages.failures, "\n\n".join(pages.failures)


def shows_the_value_cut(page, seq: int) -> None:
    """The row of the large value shows its cut preview and the link to the whole event, and never the whole value."""
    row = page.locator(f"#seq-{seq}")
    expect(row.locator(".show-all")).to_have_text(f"show all ({BIG} characters)")
    preview = row.locator(".text").inner_text()
    assert 1000 < len(preview) <= 2000 and BIG_VALUE.startswith(preview), preview[-80:]
    html = page.content()
    assert BIG_END not in html and len(html) < BIG, f"the page holds {len(html)} characters"


# Pages not shown ----------------------------------------------------------------------------------------


def append_now(sid: str, events: list[tuple[str, dict]]) -> None:
    services.append_events(session_id=sid, events=validate_batch([{"type": t, "data": d} for t, d in events]))


def long_turn(log: Log, turn: int, far: str) -> dict[str, int]:
    """A closed turn of eight pages whose every page holds whole steps (so a page opened holds an anchor for each of its
    seqs), with call `far` made on page 2 and answered on page 4: a page load shows pages 0, 6 and 7, stubs 1 to 5."""
    start = log.next_seq
    append_now(log.sid, [("turn_start", {"turn": turn}), *log.thinking(4), *log.steps(7 + 8)])  # pages 0 and 1
    log.wrote(1 + 4 + 75)
    far_call = [("step_start", {"step": 0}), ("assistant_message", {"content": "", "tool_calls": [{"id": far, "name": "charge_card"}]})]
    append_now(log.sid, [*far_call, ("tool_call", {"id": far, "name": "charge_card"}), *log.thinking(1), ("step_end", {"step": 0})])
    far_seq = log.wrote(5) - 3
    append_now(log.sid, log.steps(7 + 8))  # pages 2 and 3
    log.wrote(75)
    answer = [("step_start", {"step": 0}), *log.thinking(1), ("tool_result", {"tool_call_id": far, "content": "charged"})]
    append_now(log.sid, [*answer, *log.thinking(1), ("step_end", {"step": 0})])
    result_seq = log.wrote(5) - 2
    append_now(log.sid, [*log.steps(7 + 8 + 8 + 3), ("turn_end", {"turn": turn, "reason": "complete"})])  # pages 4 to 7
    last = log.wrote(26 * 5 + 1)
    assert (last - start) // TURN_PAGE == 7 and (far_seq - start) // TURN_PAGE == 2 and (result_seq - start) // TURN_PAGE == 4
    return {"turn": start, "far_call": far_seq, "far_result": result_seq}


@pytest.fixture
def paged(transactional_db, staff_user) -> dict:
    """A session whose latest block is a long turn, with another long turn before the latest 12 blocks."""
    log = Log("paged")
    services.create_session(session_id=log.sid)
    append_now(log.sid, [("user_message", {"content": "first"})])
    log.wrote(1)
    earlier = long_turn(log, 1, "far-1")
    for turn in range(2, 7):  # 10 blocks
        append_now(log.sid, [("user_message", {"content": f"q{turn}"}), ("turn_start", {"turn": turn}), *log.thinking(1), ("turn_end", {"turn": turn})])
        log.wrote(4)
    append_now(log.sid, [("user_message", {"content": "the long one"})])
    log.wrote(1)
    return {"earlier": earlier, "latest": long_turn(log, 7, "far-7"), "sid": log.sid}


@pytest.fixture
def logged_in(browser, server, staff_user):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.goto(f"{server.url}/login/?next=/")
    page.fill("#id_username", staff_user.username)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{server.url}/*")
    yield context
    context.close()


def stubs_shown(page, turn: int) -> list[int]:
    """The numbers of the turn's stubs a reader sees (a run of stubs reads as one gap: its first and its last)."""
    stubs = page.locator(f"#turn-{turn} .page-stub")
    return [int(stubs.nth(n).get_attribute("id").rsplit("-", 1)[1]) for n in range(stubs.count()) if stubs.nth(n).is_visible()]


def test_a_run_of_stubs_shows_as_one_gap_and_a_stub_opens_its_page_in_place(logged_in, server, paged):
    turn = paged["latest"]["turn"]
    page = logged_in.new_page()
    page.goto(f"{server.url}/sessions/{paged['sid']}/")
    assert page.locator(f"#turn-{turn} .page-stub").count() == 5
    assert stubs_shown(page, turn) == [1, 5]
    # The gap reads "Not shown: seq A … to seq B": the first stub's end and the last's start are not shown.
    expect(page.locator(f"#page-{turn}-1 .stub-to")).to_be_hidden()
    expect(page.locator(f"#page-{turn}-5 .stub-from")).to_be_hidden()

    for number, stubs_left in ((1, [2, 5]), (5, [2, 4]), (2, [3, 4])):
        first, last = turn + number * TURN_PAGE, turn + (number + 1) * TURN_PAGE - 1
        page.get_by_role("button", name=f"Show seq {first}–{last}").click()
        opened = page.locator(f"#page-{turn}-{number}")
        expect(opened).to_have_class("turn-page", timeout=LIVE)
        for seq in range(first, last + 1):
            assert opened.locator(f"#seq-{seq}").count() == 1, f"seq {seq} is not on page {number} opened"
        assert stubs_shown(page, turn) == stubs_left
    expect(page.locator(f"#page-{turn}-4 .stub-from")).to_be_hidden()  # pages 3 and 4: still one gap


@pytest.mark.parametrize(
    "where",
    ["an event on a page not shown", "a result on its call's card on a page not shown", "an event of a turn before the latest blocks"],
)
def test_a_link_to_an_event_on_a_page_not_shown_reaches_it(logged_in, server, paged, where):
    latest, earlier = paged["latest"], paged["earlier"]
    seq = {
        "an event on a page not shown": latest["turn"] + 3 * TURN_PAGE + 17,
        "a result on its call's card on a page not shown": latest["far_result"],
        "an event of a turn before the latest blocks": earlier["turn"] + 3 * TURN_PAGE + 17,
    }[where]
    page = logged_in.new_page()
    page.goto(f"{server.url}/sessions/{paged['sid']}/#seq-{seq}")
    target = page.locator(f"#seq-{seq}")
    expect(target).to_be_in_viewport(timeout=LIVE)
    if where.startswith("a result"):  # shown on the card, on the call's page
        expect(page.locator(f"#page-{latest['turn']}-2 [data-call-id='far-7'] #seq-{seq}")).to_have_count(1)


def test_a_link_followed_within_the_page_reaches_an_event_on_a_page_not_shown(logged_in, server, paged):
    seq = paged["latest"]["turn"] + 2 * TURN_PAGE + 5
    page = logged_in.new_page()
    page.goto(f"{server.url}/sessions/{paged['sid']}/")
    expect(page.locator(f"#seq-{seq}")).to_have_count(0)
    page.evaluate(f"() => {{ window.location.hash = '#seq-{seq}'; }}")
    expect(page.locator(f"#seq-{seq}")).to_be_in_viewport(timeout=LIVE)


def test_a_link_followed_while_ledger_rows_are_fetched_reaches_its_event(logged_in, server, staff_user, paged):
    """The page fetches ledger rows after a live change; a link followed meanwhile still fetches its page and scrolls."""
    seq = paged["latest"]["turn"] + 2 * TURN_PAGE + 5
    page = logged_in.new_page()
    page.goto(f"{server.url}/sessions/{paged['sid']}/")
    expect(page.locator("#live-state")).to_have_attribute("data-state", "open", timeout=LIVE)
    held, released = [], []
    page.route(f"**/sessions/{paged['sid']}/ledger?*", lambda route: route.continue_() if released else held.append(route))
    status, body = api_post(server, staff_user, f"/api/v1/sessions/{paged['sid']}/notes", {"text": "checked", "seq": paged["latest"]["far_call"]})
    assert status == 201, body
    for _ in range(LIVE // 100):  # the note's row, fetched: kept under way
        if held:
            break
        page.wait_for_timeout(100)
    assert len(held) == 1
    page.evaluate(f"() => {{ window.location.hash = '#seq-{seq}'; }}")
    expect(page.locator(f"#seq-{seq}")).to_be_in_viewport(timeout=LIVE)
    released.append(True)
    held[0].continue_()
