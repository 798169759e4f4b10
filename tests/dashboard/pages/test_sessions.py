"""The pages, rendered by Django's test client (the browser tests drive them for real)."""

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from django.utils.html import escape

from dashboard.pages import blocks, raw_log, transcript
from sessions_app import selectors, services
from sessions_app.log import recovery, strategy
from sessions_app.log.events import validate_batch
from sessions_app.models import Event, RecoveryRecord, Role, Session, ToolPolicy
from tests.access import member
from tests.sessions_app.log.strategies import message
from tests.sessions_app.log.test_recovery import WORKED_EXAMPLE, assistant, result
from tests.sessions_app.services.test_recovery import store

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff(client, django_user_model):
    """An operator of the default project: may also apply recoveries."""
    user = django_user_model.objects.create_user("ops", is_staff=True)
    member(user, Role.OPERATOR)
    client.force_login(user)
    return client


def text_of(response) -> str:
    return response.content.decode()


@pytest.mark.parametrize("path", ["/", "/sessions/s/", "/sessions/s/recovery", "/sessions/s/lineage", "/sessions/s/events/0.json"])
def test_every_page_needs_a_login(client, path):
    store([("user_message", message("hi"))], session_id="s")
    response = client.get(path)
    assert response.status_code == 302 and response.url.startswith("/login/")


def test_the_list_shows_statuses_and_filters(viewer):
    store(WORKED_EXAMPLE, session_id="crashed")
    store([("user_message", message("hi"))], session_id="fine")
    page = text_of(viewer.get("/"))
    assert "crashed" in page and "fine" in page and "open: turn 1 (opened at seq 1)" in page
    only_stalled = text_of(viewer.get("/", {"status": "stalled"}))  # its events are from January
    assert "/sessions/crashed/" in only_stalled and "/sessions/fine/" not in only_stalled
    assert "/sessions/crashed/" not in text_of(viewer.get("/", {"status": "running"}))
    assert "/sessions/crashed/" not in text_of(viewer.get("/", {"q": "fin"}))


def test_a_session_written_to_between_turns_is_active_in_the_list_filter_and_header(viewer):
    store([("user_message", message("hi"))], session_id="quiet")  # its events are from January
    services.create_session(session_id="chatting")
    services.append_events(session_id="chatting", events=validate_batch([{"type": "user_message", "data": message("now")}]))
    page = text_of(viewer.get("/"))
    assert '<option value="active">active</option>' in page
    only_active = text_of(viewer.get("/", {"status": "active"}))
    assert "/sessions/chatting/" in only_active and "/sessions/quiet/" not in only_active
    assert "/sessions/chatting/" not in text_of(viewer.get("/", {"status": "clean"}))
    assert '<span class="badge status-active">active</span>' in text_of(viewer.get("/sessions/chatting/"))
    assert '<span class="badge status-clean">clean</span>' in text_of(viewer.get("/sessions/quiet/"))


def test_the_header_names_the_open_turn_by_number_and_seq(viewer):
    store(WORKED_EXAMPLE, session_id="crashed")
    assert "<strong>Stalled:</strong> turn 1 (opened at seq 1) never closed" in text_of(viewer.get("/sessions/crashed/"))


def test_the_admin_names_open_turns_by_number_and_seq(client, django_user_model):
    client.force_login(django_user_model.objects.create_superuser("root", password="x"))
    store(WORKED_EXAMPLE, session_id="crashed")
    page = text_of(client.get("/admin/sessions_app/session/"))
    assert "turn 1 (opened at seq 1)" in page
    assert "crashed" in text_of(client.get("/admin/sessions_app/session/", {"status": "stalled"}))
    assert "crashed" not in text_of(client.get("/admin/sessions_app/session/", {"status": "active"}))


def test_the_transcript_groups_turns_steps_and_pairs_calls_with_results(viewer):
    store(WORKED_EXAMPLE, session_id="crashed")
    page = text_of(viewer.get("/sessions/crashed/"))
    assert 'id="turn-1"' in page and "Turn 1" in page and "open: never closed" in page
    assert len(re.findall(r'class="step[ "]', page)) == 2
    c1 = page[page.index('data-call-id="c1"') :][:3000]
    assert "completed" in c1 and "Result at" in c1
    c3 = page[page.index('data-call-id="c3"') :][:3000]
    assert "tool_outcome_unknown" in c3 and "(rule 1)" in c3
    assert '<article id="seq-9"' not in page and '<a id="seq-9"' in page  # c3's tool_call shows in its card
    assert "Dispatched (tool_call) at" in c3


def owed_words(page: str, call_id: str) -> tuple[str, str]:
    """The risk headline and the "Why (rule N): ..." line a page gives a call."""
    start = page.index(f'data-call-id="{call_id}"') if f'data-call-id="{call_id}"' in page else page.index(f'<code class="muted">{call_id}</code>')
    part = page[start:][:4000]
    headline = re.search(r'<strong class?="?[^>]*>((?:Outcome unknown|Not started)[^<]*)</strong>|<strong>((?:Outcome unknown|Not started)[^<]*)</strong>', part)
    why = re.search(r"Why \(rule \d\): [^<]*", part)
    return (headline.group(1) or headline.group(2)).rstrip("."), why.group(0)


def test_a_stalled_sessions_owed_calls_read_as_on_the_recovery_page(staff):
    store(WORKED_EXAMPLE, session_id="crashed")  # its events are from January: stalled
    page = text_of(staff.get("/sessions/crashed/"))
    recovery_page = text_of(staff.get("/sessions/crashed/recovery"))
    for call_id, state in [("c2", "tool_not_started"), ("c3", "tool_outcome_unknown")]:
        card = page[page.index(f'data-call-id="{call_id}"') :][:4000].split("</article>")[0]
        assert f'<span class="badge state">{state}</span>' in card
        assert "in flight" not in card and "elapsed" not in card and "running" not in card
        assert owed_words(page, call_id) == owed_words(recovery_page, call_id)
    assert owed_words(page, "c3") == ("Outcome unknown: it may have run", "Why (rule 1): " + escape(recovery.RULE_REASONS[1]))


def test_a_running_sessions_unanswered_calls_are_pending(viewer):
    services.create_session(session_id="live")
    items = [{"type": t, "data": d} for t, d in WORKED_EXAMPLE]
    services.append_events(session_id="live", events=validate_batch(items))  # written now: running
    page = text_of(viewer.get("/sessions/live/"))
    c3 = page[page.index('data-call-id="c3"') :][:4000].split("</article>")[0]
    c2 = page[page.index('data-call-id="c2"') :][:4000].split("</article>")[0]
    assert '<span class="badge state">pending</span> <span class="muted pending-detail">dispatched</span>' in c3 and 'class="elapsed"' in c3  # it has a tool_call
    assert '<span class="badge state">pending</span> <span class="muted pending-detail">requested</span>' in c2
    assert "If recovered now: <strong>Outcome unknown: it may have run</strong> (rule 1)" in c3


def test_untrusted_content_is_escaped(viewer):
    hostile = '<script>alert(1)</script><img src=x onerror="alert(2)">'
    store([("user_message", message(hostile)), ("turn_start", {"turn": 1}), assistant("c1"), result("c1")], session_id="s")
    services.append_events(session_id="s", events=validate_batch([{"type": "tool_result", "data": {"tool_call_id": "x", "content": hostile, "name": hostile}}]))
    page = text_of(viewer.get("/sessions/s/"))
    assert "<script>alert(1)" not in page and "<img src=x" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    raw = text_of(viewer.get("/sessions/s/?view=raw"))
    assert "<script>alert(1)" not in raw and "&lt;script&gt;" in raw


def test_long_values_are_cut_with_a_link_to_the_full_event(viewer):
    store([("user_message", message("x" * 5000))], session_id="s")
    page = text_of(viewer.get("/sessions/s/"))
    assert "show all (5000 characters)" in page and "x" * 2001 not in page
    full = viewer.get("/sessions/s/events/0.json").json()
    assert full["data"]["content"] == "x" * 5000
    assert viewer.get("/sessions/s/events/9.json").status_code == 404


def test_the_latest_raw_page_follows_the_log_and_earlier_pages_do_not(viewer, monkeypatch):
    monkeypatch.setattr(raw_log, "RAW_PAGE", 2)
    store([("user_message", message(f"m{i}")) for i in range(5)], session_id="s")
    latest = text_of(viewer.get("/sessions/s/?view=raw"))
    assert 'ws-connect="/ws/sessions/s/live?view=raw&amp;first=3&amp;after=4"' in latest
    assert re.findall(r'<div id="seq-(\d+)" role="row"', latest) == ["3", "4"]
    assert 'href="?view=raw&amp;before=3"' in latest
    earlier = text_of(viewer.get("/sessions/s/?view=raw&before=3"))
    assert "ws-connect" not in earlier and 'id="live-cursor"' not in earlier
    assert re.findall(r'<div id="seq-(\d+)" role="row"', earlier) == ["1", "2"]
    assert "the latest events</a> follow the log live" in earlier


def test_long_values_in_the_raw_log_are_cut_with_a_link_to_the_full_event(viewer):
    store([("user_message", message("y" * 5000))], session_id="s")
    raw = text_of(viewer.get("/sessions/s/?view=raw"))
    assert "show all (" in raw and "y" * 2001 not in raw
    assert 'href="/sessions/s/events/0.json"' in raw


def test_compacted_events_are_marked_and_expandable(viewer):
    store([("user_message", message("old question")), ("user_message", message("summary", surface_op=["replace", 0, 0]))], session_id="s")
    page = text_of(viewer.get("/sessions/s/"))
    assert "Compacted: replaced by the summary at" in page and "summary of seq 0<" in page and "seqs 0–0" not in page
    assert "shadowed by 1" in text_of(viewer.get("/sessions/s/?view=raw"))


def test_a_compacted_turn_folds_away_under_its_summary_in_place(viewer):
    store([
        ("user_message", message("q1")), ("turn_start", {"turn": 1}), assistant("c1"), result("c1"),
        ("turn_end", {"turn": 1, "steps": 0, "reason": "complete"}),
        ("user_message", message("the user asked q1; the tool said ok", surface_op=["replace", 0, 4])),
        ("user_message", message("q2")),
    ], session_id="s")  # fmt: skip
    page = text_of(viewer.get("/sessions/s/"))
    turn = page[page.index('<section id="turn-1"') : page.index('<section id="event-5"')]
    assert "block turn compacted" in turn and "Turn 1: compacted into the summary at seq 5 (show)" in turn
    first = page[page.index('<section id="event-0"') : page.index('<section id="turn-1"')]
    assert "<strong>Summary</strong> of seqs 0–4, standing here" in first and "the user asked q1" in first
    assert "compacted" not in page[page.index('<section id="event-6"') :]


def test_a_summary_shows_once_labelled_as_a_summary(viewer):
    store([
        ("user_message", message("q1")), ("assistant_message", message("a1")),
        ("user_message", message("The user asked q1 and got a1.", surface_op=["replace", 0, 1])),
    ], session_id="s")  # fmt: skip
    page = text_of(viewer.get("/sessions/s/"))
    assert page.count("The user asked q1 and got a1.") == 1
    in_place = page[page.index('<div class="summary-in-place" id="summary-2">') :][:1000]
    assert "The user asked q1 and got a1." in in_place and "<strong>Summary</strong> of seqs 0–1" in in_place
    own = page[page.index('<article id="seq-2"') :].split("</article>")[0]
    assert '<span class="who">summary</span>' in own and '<span class="who">user</span>' not in own
    assert 'href="#summary-2">in the place of seqs 0–1</a>' in own


def test_long_text_is_cut_between_words_never_inside_one(viewer):
    words = " ".join(f"word{i:04}" for i in range(400))  # 3,599 characters
    store([("user_message", message(words, surface_op=["replace", 0, 0]))], session_id="s")
    page = text_of(viewer.get("/sessions/s/"))
    shown = re.search(r'<div class="text">([^<]*)</div>', page).group(1)
    assert len(shown) <= blocks.TRUNCATE_CHARS and words.startswith(shown) and re.fullmatch(r"(word\d{4} )*word\d{4}", shown)
    assert f"show all ({len(words)} characters)" in page
    raw = text_of(viewer.get("/sessions/s/?view=raw"))
    preview = re.search(r"<details><summary>([^<]*)</summary>", raw).group(1)
    assert preview.endswith("…") and re.search(r"word\d{4}…$", preview)


def test_a_large_session_opens_on_its_latest_turns_with_constant_queries(viewer):
    def turn(n):
        return [("user_message", message(f"q{n}")), ("turn_start", {"turn": n}), assistant(f"c{n}"), result(f"c{n}"),
                ("turn_end", {"turn": n, "steps": 0, "reason": "complete"})]  # fmt: skip

    store([item for n in range(1, 41) for item in turn(n)], session_id="small")
    store([item for n in range(1, 201) for item in turn(n)], session_id="big")
    counts = {}
    for sid in ["small", "big"]:
        with CaptureQueriesContext(connection) as queries:
            page = text_of(viewer.get(f"/sessions/{sid}/"))
        counts[sid] = len(queries)
        assert "Load earlier turns" in page and "q1<" not in page
    assert counts["small"] == counts["big"]
    page = text_of(viewer.get("/sessions/big/"))
    shown_turns = transcript.BLOCKS_PER_PAGE // 2  # each turn is preceded by its user message block
    assert f"Turn {200 - shown_turns + 1}<" in page and f"Turn {200 - shown_turns}<" not in page
    before = re.search(r"before=(\d+)", page).group(1)
    earlier = text_of(viewer.get(f"/sessions/big/blocks?before={before}", HTTP_HX_REQUEST="true"))
    assert f"Turn {200 - shown_turns}<" in earlier and f'id="turn-{int(before)}"' not in earlier


def test_recovery_preview_shows_risks_evidence_and_the_events_to_append(staff):
    ToolPolicy.objects.create(pattern="ech*", side_effect="external_effect")
    store(WORKED_EXAMPLE, session_id="crashed")
    page = text_of(staff.get("/sessions/crashed/recovery"))
    assert "Outcome unknown: it may have run" in page and "Not started: it did not run" in page
    owed_order = re.findall(r'<h3><span class="tool-name">echo</span> <code class="muted">(c\d)</code></h3>', page)
    assert owed_order == ["c3", "c2"]  # the unknown outcome of an external-effect tool first
    assert "Check this first" in page and "Why (rule 1)" in page and "Why (rule 2)" in page
    assert '#seq-9">seq 9</a>' in page and '#seq-6">seq 6</a>' not in page  # c3 rule 1: its tool_call
    assert '#seq-4">seq 4</a>' in page  # c2 rule 2: the sibling's tool_call
    assert "Confirming appends exactly these 3 events" in page and "Confirm recovery" in page
    assert "may still be running" not in page  # its last event is from January


def test_rule_4_is_explained_without_contradicting_the_text_it_appends(staff):
    store([("turn_start", {"turn": 1}), ("step_start", {}), assistant("c1")], session_id="crashed")
    page = text_of(staff.get("/sessions/crashed/recovery"))
    assert "Why (rule 4): " + escape(recovery.RULE_REASONS[4]) in page
    assert "Tool call was dispatched but the session was interrupted" in page  # the text it appends
    assert "whether it was dispatched" not in page
    assert owed_words(text_of(staff.get("/sessions/crashed/")), "c1") == owed_words(page, "c1")


def test_a_viewer_sees_no_confirm_button_and_is_refused(viewer):
    store(WORKED_EXAMPLE, session_id="crashed")
    page = text_of(viewer.get("/sessions/crashed/recovery"))
    assert "Confirm recovery" not in page and "needs the" in page
    digest = selectors.recovery_plan(Session.objects.get()).digest(10)
    assert viewer.post("/sessions/crashed/recovery", {"digest": digest}).status_code == 403
    assert Event.objects.count() == 10


def test_the_recovery_page_serves_only_get_and_post(staff):
    store(WORKED_EXAMPLE, session_id="crashed")
    for method in ("put", "patch", "delete"):
        response = getattr(staff, method)("/sessions/crashed/recovery")
        assert response.status_code == 405 and response["Allow"] == "GET, POST", method
    assert Event.objects.count() == 10


def test_confirming_appends_and_lands_on_the_highlighted_events(staff):
    store(WORKED_EXAMPLE, session_id="crashed")
    digest = selectors.recovery_plan(Session.objects.get()).digest(10)
    response = staff.post("/sessions/crashed/recovery", {"digest": digest, "note": "verified"})
    assert response.status_code == 302 and response.url == "/sessions/crashed/?highlight=10-12#seq-10"
    page = text_of(staff.get(response.url))
    assert page.count(" highlight") >= 2 and "interrupted (closed by recovery)" in page
    assert "verified" in page and RecoveryRecord.objects.get().username == "ops"
    assert "tool_outcome_unknown" in page and "tool_not_started" in page


def test_a_recovered_turn_shows_its_open_step_as_interrupted_and_no_dead_hours(staff, django_user_model):
    store(WORKED_EXAMPLE, session_id="crashed")  # seqs one second apart, in January
    services.recover(session_id="crashed", user=django_user_model.objects.get(username="ops"))
    page = text_of(staff.get("/sessions/crashed/"))
    head = page[page.index('<header class="turn-head"') :].split("</header>")[0]
    # From turn_start (seq 1) to its last real event (seq 9): 8 s; then months until the recovery.
    assert re.search(r"last heard from 8\.0 s into the turn; what ran after that is unknown · recovered \d+ d \d+ h later", head)
    step_two = page[page.index('<div class="step step-interrupted" id="seq-7">') :][:600]
    assert '<span class="badge danger">interrupted</span>' in step_two and '<span class="badge warn">open</span>' not in page


def test_a_stale_preview_appends_nothing_and_shows_the_fresh_plan(staff):
    store(WORKED_EXAMPLE, session_id="crashed")
    digest = selectors.recovery_plan(Session.objects.get()).digest(10)
    services.append_events(session_id="crashed", events=validate_batch([{"type": "tool_result", "data": {"tool_call_id": "c3", "content": "back"}}]))
    response = staff.post("/sessions/crashed/recovery", {"digest": digest})
    assert response.status_code == 409 and "Nothing was appended" in text_of(response)
    assert Event.objects.count() == 11


def test_a_late_real_result_supersedes_the_synthetic_one(staff, django_user_model):
    store(WORKED_EXAMPLE, session_id="crashed")
    services.recover(session_id="crashed", user=django_user_model.objects.get(username="ops"))
    services.append_events(session_id="crashed", events=validate_batch([{"type": "tool_result", "data": result("c3")[1]}]))
    page = text_of(staff.get("/sessions/crashed/"))
    card = page[page.index('data-call-id="c3"') :][:3000]
    assert "superseded" in card and "the real result arrived at" in card and "seq 13" in card
    assert "Result for call <code>c3</code>" in page  # the late result also stands where it arrived


def test_fork_here_lands_on_the_fork_with_its_provenance(viewer):
    store([("user_message", message("a")), ("user_message", message("b"))], session_id="p")
    response = viewer.post("/sessions/p/fork", {"boundary": "0"})
    child = Session.objects.get(parent_id="p")
    assert response.status_code == 302 and response.url == f"/sessions/{child.id}/"
    page = text_of(viewer.get(response.url))
    assert "Forked from" in page and "at seq 0" in page and " inherited" in page
    assert child.id in text_of(viewer.get("/sessions/p/"))  # the parent lists its forks
    lineage = text_of(viewer.get(f"/sessions/{child.id}/lineage"))
    assert "p</code>" in lineage and "(this session)" in lineage


def test_a_refused_fork_explains_and_suggests(viewer):
    store(WORKED_EXAMPLE, session_id="crashed")
    response = viewer.post("/sessions/crashed/fork", {"boundary": "5"}, HTTP_HX_REQUEST="true")
    page = text_of(response)
    assert "seq 5 is inside turn 1, opened at seq 1 and still open" in page
    assert "?boundary=0" in page and "Fork at seq 0" in page and "Recover the session first" in page
    assert Session.objects.count() == 1


def test_admin_action_leads_to_the_preview(client, django_user_model):
    client.force_login(django_user_model.objects.create_superuser("root", password="x"))
    store(WORKED_EXAMPLE, session_id="crashed")
    response = client.post("/admin/sessions_app/session/", {"action": "preview_recovery", "_selected_action": ["crashed"]})
    assert response.status_code == 302 and response.url == "/sessions/crashed/recovery"
    assert client.get("/admin/sessions_app/toolpolicy/add/").status_code == 200
    assert client.get("/admin/sessions_app/recoveryrecord/").status_code == 200


def test_a_recent_last_event_warns_that_the_agent_may_still_be_running(staff):
    services.create_session(session_id="live")
    services.append_events(session_id="live", events=validate_batch([{"type": "turn_start", "data": {"turn": 1}}]))
    assert "the agent may still be running" in text_of(staff.get("/sessions/live/recovery"))


@pytest.mark.parametrize("cid", ["c1", "c" * 300])
def test_a_result_outside_its_calls_window_points_at_the_card_whatever_the_id_length(cid):
    # Call ids longer than their column are stored as digests; the page still finds the card.
    session = store([
        ("turn_start", {"turn": 1}), assistant(cid), ("turn_end", {"turn": 1, "steps": 0, "reason": "complete"}),
        ("turn_start", {"turn": 2}), result(cid), ("turn_end", {"turn": 2, "steps": 0, "reason": "complete"}),
    ])  # fmt: skip
    window = transcript.latest_window(session, blocks=1)
    rows = [row for block in window.blocks for row in block.rows if row.answers == cid]
    assert [row.card_seq for row in rows] == [1]


# Recovery strategies (session-log.md section 8.1) on the pages.


def call(cid: str, name: str) -> dict:
    return {"id": cid, "name": name, "arguments": {"for": cid}}


def crash_with(*names_done_and_owed: tuple[str, str, bool]) -> list:
    """A turn whose one step asked for these calls (id, tool, completed?), dispatched each, answered the completed ones."""
    items = [("turn_start", {"turn": 1}), ("step_start", {"turn": 1, "step": 1})]
    items.append(("assistant_message", message("", tool_calls=[call(cid, name) for cid, name, _ in names_done_and_owed])))
    for cid, name, completed in names_done_and_owed:
        items.append(("tool_call", {"id": cid, "name": name}))
        if completed:
            items.append(("tool_result", message(f"{name} done", tool_call_id=cid, name=name)))
    return items


EMAIL_THEN_CHARGE = crash_with(("e1", "send_email", True), ("p1", "charge_card", False))


def external_effects(*patterns: str) -> None:
    for pattern in patterns:
        ToolPolicy.objects.create(pattern=pattern, side_effect="external_effect")


def strategy_block(page: str) -> str:
    return page[page.index('<section aria-labelledby="strategies"') :].split("</section>")[0]


@pytest.mark.parametrize(
    ("log", "expected", "verify", "done"),
    [
        (EMAIL_THEN_CHARGE, strategy.MANUAL_CHECK, ["charge_card"], ["send_email"]),
        (crash_with(("e1", "send_email", True), ("l1", "lookup", False)), strategy.RESUME_AFTER_EFFECTS, [], ["send_email"]),
        (crash_with(("l1", "lookup", True), ("l2", "lookup", False)), strategy.RESTART_TURN, [], []),
    ],
)
def test_the_recovery_page_recommends_a_strategy_in_words(staff, log, expected, verify, done):
    external_effects("send_email", "charge_card")
    ToolPolicy.objects.create(pattern="lookup", side_effect="read_only")
    store(log, session_id="crashed")
    page = text_of(staff.get("/sessions/crashed/recovery"))
    block = strategy_block(page)
    assert escape(strategy.HEADLINES[expected]) in block and escape(strategy.ADVICE[expected]) in block
    assert f'<code class="badge strategy-name">{expected}</code>' in block
    items = re.findall(r'<li class="(unverified|effect)"><span class="tool-name">([^<]+)</span>(.*?)</li>', block, re.S)
    assert [name for kind, name, _ in items if kind == "unverified"] == verify
    assert [name for kind, name, _ in items if kind == "effect"] == done
    for kind, _name, words in items:
        assert (strategy.UNVERIFIED_WORDS if kind == "unverified" else strategy.EFFECT_WORDS) in words
        assert re.search(r'#seq-\d+">seq \d+</a>', words)  # the call's first sighting, linked
    assert f"Apply the recommended strategy ({expected})" in page and "Abandon the turn" in page
    assert "Add a recovery note for the agent (system message)" in page
    # The header's alert names the same recommendation, and the calls that decided it.
    alert = text_of(staff.get("/sessions/crashed/")).split('id="session-state"')[1].split("</div>")[0]
    assert f"Recommended: <strong>{escape(strategy.HEADLINES[expected])}</strong>" in alert
    assert ("decided by" in alert) == (expected != strategy.RESTART_TURN)
    for name in verify or done:
        assert f'<span class="tool-name">{name}</span>' in alert


def test_a_viewer_reads_the_strategy_but_gets_no_choice(viewer):
    external_effects("send_email", "charge_card")
    store(EMAIL_THEN_CHARGE, session_id="crashed")
    page = text_of(viewer.get("/sessions/crashed/recovery"))
    assert escape(strategy.HEADLINES[strategy.MANUAL_CHECK]) in strategy_block(page)
    assert 'name="abandon"' not in page and 'name="context"' not in page and "Confirm recovery" not in page


def confirm(client, **options) -> tuple[recovery.Plan, list[Event], object]:
    """POST the recovery form for the plan as it stands: (that plan, the events appended, the response)."""
    session = Session.objects.get(pk="crashed")
    plan = selectors.recovery_plan(session)
    response = client.post("/sessions/crashed/recovery", {"digest": plan.digest(session.event_count), **options})
    assert response.status_code == 302, text_of(response)
    appended = list(Event.objects.filter(session_id="crashed", seq__gte=session.event_count).order_by("seq"))
    return plan, appended, response


def test_confirming_with_context_appends_the_plan_then_one_system_message(staff):
    external_effects("send_email", "charge_card")
    store(EMAIL_THEN_CHARGE, session_id="crashed")
    plan, appended, response = confirm(staff, context="1", note="checked")
    assert [(e.type, e.data) for e in appended[:-1]] == [(r.type, r.data) for r in plan.repairs]
    note = appended[-1]
    assert note.type == "system_message" and note.data["metadata"] == {"synthetic": True, "recovery_context": True}
    assert "charge_card" in note.data["content"] and "send_email" in note.data["content"]
    record = RecoveryRecord.objects.get()
    assert record.context_seq == note.seq and not record.abandoned and record.strategy_names == [strategy.MANUAL_CHECK]
    assert response.url == f"/sessions/crashed/?highlight={appended[0].seq}-{note.seq}#seq-{appended[0].seq}"
    history = text_of(staff.get("/sessions/crashed/recovery")).split('id="history"')[1]
    assert f"with context, seq {note.seq}" in history and "manual_check" in history and "abandoned" not in history


def test_abandoning_is_recorded_and_appends_exactly_the_plan(staff):
    external_effects("send_email", "charge_card")
    store(EMAIL_THEN_CHARGE, session_id="crashed")
    plan, appended, _ = confirm(staff, abandon="1")
    assert [(e.type, e.data) for e in appended] == [(r.type, r.data) for r in plan.repairs]
    record = RecoveryRecord.objects.get()
    assert record.abandoned and record.context_seq is None
    history = text_of(staff.get("/sessions/crashed/recovery")).split('id="history"')[1]
    assert '<span class="badge danger">abandoned</span>' in history
    assert '<span class="badge danger">abandoned</span>' in text_of(staff.get("/sessions/crashed/"))  # the header's list


def test_abandoning_with_context_tells_the_agent_the_turn_was_abandoned(staff):
    external_effects("send_email", "charge_card")
    store(EMAIL_THEN_CHARGE, session_id="crashed")
    plan, appended, _ = confirm(staff, abandon="1", context="1")
    assert len(appended) == len(plan.repairs) + 1 and "abandoned by a person" in appended[-1].data["content"]
    assert RecoveryRecord.objects.get().abandoned


def test_confirming_without_options_appends_exactly_the_plan(staff):
    external_effects("send_email", "charge_card")
    store(EMAIL_THEN_CHARGE, session_id="crashed")
    plan, appended, _ = confirm(staff, abandon="")  # the form's default choice: the recommended strategy
    assert [(e.type, e.data) for e in appended] == [(r.type, r.data) for r in plan.repairs]
    record = RecoveryRecord.objects.get()
    assert not record.abandoned and record.context_seq is None and not record.automatic
    assert not Event.objects.filter(session_id="crashed", type="system_message").exists()


def test_repeated_failures_show_in_the_header_and_the_list(viewer):
    store(EMAIL_THEN_CHARGE, session_id="crashed")
    store([("user_message", message("hi"))], session_id="fine")
    assert "repeated failures" not in text_of(viewer.get("/"))
    Session.objects.filter(pk="crashed").update(repeated_failures_at=timezone.now())
    rows = text_of(viewer.get("/")).split('<tbody id="session-rows">')[1]
    crashed_row = rows[rows.index('id="session-crashed"') :].split("</tr>")[0]
    fine_row = rows[rows.index('id="session-fine"') :].split("</tr>")[0]
    assert "repeated failures" in crashed_row and "repeated failures" not in fine_row
    state = text_of(viewer.get("/sessions/crashed/")).split('id="session-state"')[1]
    assert '<span class="badge danger">repeated failures</span>' in state


@pytest.mark.parametrize("metadata", [[None, []], "oops", 7])
def test_a_result_whose_metadata_is_not_an_object_reads_as_completed(client, metadata, django_user_model):
    from sessions_app import services
    from sessions_app.log.events import validate_batch
    from tests.access import member

    services.create_session(session_id="odd-meta")
    services.append_events(session_id="odd-meta", events=validate_batch([
        {"type": "assistant_message", "data": {"content": "", "tool_calls": [{"id": "c1", "name": "echo"}]}},
        {"type": "tool_result", "data": {"tool_call_id": "c1", "content": "ok", "metadata": metadata}},
    ]))  # fmt: skip
    user = django_user_model.objects.create_user("meta-reader")
    member(user, role="viewer")
    client.force_login(user)
    response = client.get("/sessions/odd-meta/")
    assert response.status_code == 200 and "completed" in response.content.decode()
