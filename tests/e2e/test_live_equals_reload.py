"""Live equals reload: a session page kept open while its session lives reads as a fresh load of it.

A session (kept within one page of blocks) goes through appends, a compaction,
a turn opening and closing, a crash, a recovery from another tab and a fork.
After each step the open transcript and raw log pages are compared with fresh
loads of the same pages: the header, the tab bar and every block (or raw row)
present in both. Only what differs between two correct renders is normalised:
the text of relative times and elapsed timers (the script rewrites it every
second; their datetime attributes are compared), page-load tokens and cursors,
htmx's transient classes and whitespace. What the reader chose (a <details>
opened) is not touched here, so it must match too.

On SQLite one Daphne (in-memory layer) serves the pages and takes the writes.
On PostgreSQL the pages are served by one Daphne and the writes go through
another, the two joined by Redis, as when a deployment scales out.
"""

from __future__ import annotations

import contextlib
import difflib
import os
import re
import time

import pytest
from django.db import connection
from playwright.sync_api import expect

from tests.e2e.conftest import PASSWORD, api_post, open_page
from tests.servers import DaphneServer, RedisServer

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SID = "live-eq"
LIVE = 15_000  # ms: the longest a frame that must come may take (a loaded machine)
SETTLE = 6.0  # s: a page catches up with a change no event carries (its status check runs every REFRESH)
STALL, REFRESH = "3", "0.5"  # the servers' TURNLOG_STALL_SECONDS and TURNLOG_PAGE_REFRESH_SECONDS

# A copy of each element without what two correct renders may differ in: the text of relative
# times and elapsed timers (rewritten every second by the script; their datetime attributes stay)
# and htmx's transient classes.
SNAPSHOT = """() => {
  const clean = (el) => {
    if (!el) return null;
    const copy = el.cloneNode(true);
    copy.querySelectorAll("time[data-relative], .elapsed").forEach((timer) => { timer.textContent = ""; });
    [copy, ...copy.querySelectorAll("[class]")].forEach((e) => {
      [...e.classList].filter((name) => name.startsWith("htmx-")).forEach((name) => e.classList.remove(name));
      if (e.getAttribute("class") === "") e.removeAttribute("class");
    });
    return copy.outerHTML;
  };
  const blocks = {};
  document.querySelectorAll("#blocks > [id], #raw-rows > [id]").forEach((el) => { blocks[el.id] = clean(el); });
  return {
    header: clean(document.getElementById("session-head")), tabs: clean(document.querySelector("nav.tabs")),
    ledger: clean(document.getElementById("ledger-panel")), blocks,
  };
}"""
# Page-load tokens and cursors, and whitespace.
NORMALISE = [
    (re.compile(r'(name="csrfmiddlewaretoken" value=")[^"]*'), r"\1"),
    (re.compile(r'(data-last-seq|ws-connect)="[^"]*"'), r'\1=""'),
    (re.compile(r"\s+"), " "),
    (re.compile(r">\s+<"), "><"),
]


def normalised(html: str | None) -> str | None:
    if html is None:
        return None
    for pattern, replacement in NORMALISE:
        html = pattern.sub(replacement, html)
    return html.strip()


def snapshot(page) -> dict:
    shown = page.evaluate(SNAPSHOT)
    return {
        "header": normalised(shown["header"]),
        "tabs": normalised(shown["tabs"]),
        "ledger": normalised(shown["ledger"]),
        "blocks": {key: normalised(html) for key, html in shown["blocks"].items()},
    }


def differences(live: dict, fresh: dict) -> list[str]:
    """What the live page shows otherwise than a fresh load: a unified diff per element."""
    found = []
    pairs = [("header", live["header"], fresh["header"]), ("tabs", live["tabs"], fresh["tabs"]), ("ledger", live["ledger"], fresh["ledger"])]
    pairs += [(key, live["blocks"][key], fresh["blocks"][key]) for key in fresh["blocks"] if key in live["blocks"]]
    for name, shown, reloaded in pairs:
        if shown != reloaded:
            split = lambda html: (html or "").replace("><", ">\n<").splitlines()  # noqa: E731
            diff = difflib.unified_diff(split(reloaded), split(shown), "reload", "live", lineterm="", n=1)
            found.append(f"{name}:\n" + "\n".join(diff))
    if list(live["blocks"]) != list(fresh["blocks"]):
        found.append(f"blocks: live {list(live['blocks'])}, reload {list(fresh['blocks'])}")
    return found


class Pages:
    """The open (live) session pages (`queries`: the transcript and the raw log), and fresh loads of them in another tab."""

    def __init__(self, browser, server, user, *, sid: str = SID, queries: tuple[str, ...] = ("", "?view=raw")):
        self.context = browser.new_context(viewport={"width": 1280, "height": 900})
        login = self.context.new_page()
        login.goto(f"{server.url}/login/?next=/")
        login.fill("#id_username", user.username)
        login.fill("#id_password", PASSWORD)
        login.click("button[type=submit]")
        login.wait_for_url(f"{server.url}/*")
        login.close()
        self.sid, self.server = sid, server
        self.open = {query: self.context.new_page() for query in queries}
        self.transcript, self.raw = self.open.get(""), self.open.get("?view=raw")
        self.failures: list[str] = []
        self.messages: list[str | bytes] = []  # every websocket message the open pages received
        for query, page in self.open.items():
            page.on("websocket", lambda socket: socket.on("framereceived", lambda message: self.messages.append(message)))
            page.goto(f"{server.url}/sessions/{sid}/{query}")
            expect(page.locator("#live-state")).to_have_attribute("data-state", "open", timeout=LIVE)

    def fresh(self, query: str) -> dict:
        page = self.context.new_page()
        try:
            page.goto(f"{self.server.url}/sessions/{self.sid}/{query}")
            return snapshot(page)
        finally:
            page.close()

    def compare(self, step: str, last_seq: int) -> None:
        """Both live pages have shown seq `last_seq` and, within SETTLE, read as fresh loads of them.

        A difference is noted and the session driven on, so one run reports every step that differs.
        """
        for query, page in self.open.items():
            expect(page.locator("#live-cursor")).to_have_attribute("data-last-seq", str(last_seq), timeout=LIVE)
            deadline = time.monotonic() + SETTLE
            while found := differences(snapshot(page), self.fresh(query)):
                if time.monotonic() > deadline:
                    self.failures.append(f"after {step}, the live page{query} differs from a reload:\n" + "\n\n".join(found))
                    break
                page.wait_for_timeout(250)

    def check(self, step: str, expectation) -> None:
        """A check of what the live page shows, noted like a difference when it fails."""
        try:
            expectation()
        except AssertionError as failed:
            self.failures.append(f"after {step}: {failed}")


@pytest.fixture
def servers(transactional_db, tmp_path):
    """(the pages' server, the writes' server): one Daphne on SQLite; two joined by Redis on PostgreSQL."""
    with live_servers(tmp_path, TURNLOG_STALL_SECONDS=STALL, TURNLOG_PAGE_REFRESH_SECONDS=REFRESH) as both:
        yield both


@contextlib.contextmanager
def live_servers(tmp_path, **env: str):
    """(the pages' server, the writes' server), with `env`: one Daphne on SQLite; two joined by Redis on PostgreSQL
    (REDIS_URL's, or a redis-server of the test's own)."""
    started, redis = [], None
    if connection.vendor == "postgresql":
        redis_url = os.environ.get("REDIS_URL")
        if not redis_url:
            redis = RedisServer(tmp_path / "redis.log").start()
            redis_url = redis.url
        env["REDIS_URL"] = redis_url
    count = 2 if connection.vendor == "postgresql" else 1
    try:
        for number in range(count):
            started.append(DaphneServer(connection.settings_dict, tmp_path / f"daphne-{number}.log", **env).start())
        yield started[0], started[-1]
    finally:
        for server in started:
            server.stop()
        if redis is not None:
            redis.kill()


def append(server, user, *events) -> None:
    status, body = api_post(server, user, f"/api/v1/sessions/{SID}/events", {"events": [{"type": t, "data": d} for t, d in events]})
    assert status == 201, body


def call(call_id: str, name: str) -> tuple[str, dict]:
    return "assistant_message", {"content": "", "tool_calls": [{"id": call_id, "name": name, "arguments": {"n": 1}}]}


def test_a_live_session_page_reads_as_a_reload_after_every_step(browser, servers, staff_user):
    pages_server, writes_server = servers
    status, body = api_post(writes_server, staff_user, "/api/v1/sessions", {"id": SID, "agent_name": "eq-agent"})
    assert status == 201, body
    append(writes_server, staff_user,
        ("user_message", {"content": "q1"}),
        ("turn_start", {"turn": 1}),
        call("c1", "lookup"),
        ("tool_call", {"id": "c1", "name": "lookup"}),
        ("tool_result", {"tool_call_id": "c1", "content": "found"}),
        ("turn_end", {"turn": 1, "steps": 0, "reason": "complete"}),
    )  # fmt: skip
    pages = Pages(browser, pages_server, staff_user)
    pages.compare("the first load", 5)

    append(writes_server, staff_user, ("user_message", {"content": "q2"}), ("assistant_message", {"content": "thinking"}))
    pages.compare("appends", 7)

    # A summary of seqs 0-5: the blocks it replaces collapse, as a reload shows them.
    append(writes_server, staff_user, ("user_message", {"content": "the story so far", "surface_op": ["replace", 0, 5]}))
    pages.compare("a compaction", 8)
    pages.check("a compaction", lambda: expect(pages.transcript.locator("#turn-1 > details.compacted")).not_to_have_attribute("open", ""))

    append(writes_server, staff_user,
        ("turn_start", {"turn": 2}),
        ("step_start", {"turn": 2, "step": 1}),
        call("c2", "charge_card"),
        ("tool_call", {"id": "c2", "name": "charge_card"}),
    )  # fmt: skip
    pages.compare("a turn opening", 12)
    pages.check("a turn opening", lambda: expect(pages.transcript.locator("#session-head")).to_contain_text("Fork whole session: not now"))
    pages.check("a turn opening", lambda: expect(pages.raw.locator("#seq-10 .permalink")).to_have_attribute("title", re.compile("^No fork here: ")))

    append(writes_server, staff_user,
        ("tool_result", {"tool_call_id": "c2", "content": "charged"}),
        ("step_end", {"turn": 2, "step": 1, "outcome": "ok"}),
        ("turn_end", {"turn": 2, "steps": 1, "reason": "complete"}),
    )  # fmt: skip
    pages.compare("a turn closing", 15)

    # A crash: a turn opens, a call is dispatched, and nothing more comes.
    append(writes_server, staff_user, ("turn_start", {"turn": 3}), call("c3", "charge_card"), ("tool_call", {"id": "c3", "name": "charge_card"}))
    pages.compare("a turn running", 18)
    pages.transcript.wait_for_timeout((int(STALL) + 1) * 1000)  # silence: the session is stalled now
    pages.compare("the crash (stalled)", 18)

    # Recovered from another tab, which another server may serve.
    operator = open_page(browser, writes_server, staff_user, f"/sessions/{SID}/recovery")
    operator.get_by_role("button", name="Confirm recovery").click()
    operator.wait_for_url(re.compile(rf".*/sessions/{SID}/\?highlight=.*"))
    pages.compare("a recovery from another tab", 20)
    pages.check("a recovery", lambda: expect(pages.transcript.locator("nav.tabs")).to_contain_text("Recovery (1)"))
    pages.check("a recovery", lambda: expect(pages.transcript.locator("#session-head")).not_to_contain_text("Preview recovery"))

    # The charge's real result arrives late: its card and its ledger row read superseded, live as on a reload.
    append(writes_server, staff_user, ("tool_result", {"tool_call_id": "c3", "content": "charged after all"}))
    pages.compare("a late real result", 21)
    pages.check("a late result", lambda: expect(pages.transcript.locator('#ledger-panel [data-call="c3"]')).to_have_attribute("data-state", "superseded"))
    # A note from the API, on the late result: on the card and in the ledger, with no event.
    status, body = api_post(writes_server, staff_user, f"/api/v1/sessions/{SID}/notes", {"text": "billing confirmed", "tags": ["verified"], "seq": 21})
    assert status == 201, body
    pages.check("a note", lambda: expect(pages.transcript.locator('[data-call-id="c3"] .note-item')).to_contain_text("billing confirmed", timeout=LIVE))
    pages.compare("a note", 21)

    status, body = api_post(writes_server, staff_user, f"/api/v1/sessions/{SID}/fork", {"boundary": "last", "id": f"{SID}-fork"})
    assert status == 201, body
    pages.check("a fork", lambda: expect(pages.transcript.locator("#session-head .forks")).to_contain_text(f"{SID}-fork", timeout=LIVE))
    pages.compare("a fork", 21)
    assert not pages.failures, "\n\n".join(pages.failures)


def test_a_fork_form_opened_in_the_header_outlives_frames_while_the_fork_is_offered(browser, server, plain_user):
    """Frames re-render the whole header: a form being filled in stays, until a reload would no longer offer it."""
    from sessions_app import services
    from sessions_app.log.events import validate_batch
    from tests.sessions_app.services.test_recovery import store

    def append_now(*events) -> None:
        services.append_events(session_id="forming", events=validate_batch([{"type": t, "data": d} for t, d in events]))

    store([("user_message", {"content": "q1"})], session_id="forming")
    page = open_page(browser, server, plain_user, "/sessions/forming/")
    expect(page.locator("#live-state")).to_have_attribute("data-state", "open", timeout=LIVE)
    page.locator("#session-head .fork-whole").click()
    name = page.locator("#session-head .fork-form").get_by_label("Name of the new session")
    expect(name).to_be_focused(timeout=LIVE)
    name.fill("kept-name")

    append_now(("user_message", {"content": "q2"}))
    expect(page.locator("#live-cursor")).to_have_attribute("data-last-seq", "1", timeout=LIVE)
    expect(page.locator("#session-head .facts")).to_be_visible()
    expect(name).to_have_value("kept-name")
    expect(name).to_be_focused()

    append_now(("turn_start", {"turn": 1}))  # a reload offers no fork of the whole session now
    expect(page.locator("#session-head")).to_contain_text("Fork whole session: not now", timeout=LIVE)
    expect(page.locator("#session-head .fork-form")).to_have_count(0)
