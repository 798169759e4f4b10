"""The small things a new user reads and trips on, each as a class (every page where it occurs): wording,
odd data shown as JSON, links, filters that say what they ignored."""

import io
import re
from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.staticfiles import finders
from django.core.management import call_command
from django.utils import timezone
from django.utils.html import escape

from dashboard.pages import transcript
from sessions_app import services
from sessions_app.log.events import validate_batch
from sessions_app.models import AuditEntry, Project, Role, Session
from tests.access import member, token_for
from tests.sessions_app.log.strategies import message
from tests.sessions_app.services.test_recovery import store

pytestmark = pytest.mark.django_db

README = (Path(settings.BASE_DIR) / "README.md").read_text()


@pytest.fixture
def operator(client, django_user_model):
    """An operator of the default project, also its admin (the audit log is for admins)."""
    user = django_user_model.objects.create_user("ops")
    member(user, Role.ADMIN)
    client.force_login(user)
    return client


def text_of(response) -> str:
    assert response.status_code == 200, response.status_code
    return response.content.decode()


def append_now(session_id: str, items: list[tuple[str, dict]]) -> None:
    """Events timed by the server now (a live agent), not the fixtures' January."""
    services.append_events(session_id=session_id, events=validate_batch([{"type": t, "data": d} for t, d in items]))


# a. `make simulate` takes the HOST and PORT of `make run` ---------------------------------


def test_the_readme_and_the_simulators_help_say_make_simulate_takes_make_runs_host_and_port(capsys):
    makefile = (Path(settings.BASE_DIR) / "Makefile").read_text()
    assert "simulate --url http://$(HOST):$(PORT)" in makefile  # what the docs below describe
    where_run_is_described = README[: README.index("Turnlog is a live web dashboard")]
    assert "`make simulate` takes the same `HOST` and `PORT`" in " ".join(where_run_is_described.split())
    assert "`make simulate PORT=8123`" in README
    with pytest.raises(SystemExit):
        call_command("simulate", "--help")
    help_text = " ".join(capsys.readouterr().out.split())
    assert "make simulate PORT=8123" in help_text and "HOST" in help_text


# b. Odd event data reads as JSON, never as a Python repr ----------------------------------

ODD = {"flag": True, "none": None}  # Python's repr: {'flag': True, 'none': None}
ODD_REPRS = ("&#x27;flag&#x27;", "&#x27;none&#x27;", ": True", ": None")


def odd_log() -> list[tuple[str, dict]]:
    return [
        ("user_message", message("hi", name=ODD)),
        ("turn_start", {"turn": ODD}),
        ("step_start", {"turn": ODD, "step": [ODD]}),
        ("assistant_message", message("", tool_calls=[{"id": "c1", "name": "echo", "arguments": {"a": ODD}}])),
        ("tool_result", message("ok", tool_call_id="c1", name="echo", metadata={"duration_ms": ODD})),
        ("step_end", {"turn": ODD, "step": [ODD], "outcome": ODD}),
        ("request_header", {"odd": ODD}),
        ("tool_result", message("late", tool_call_id="c9", metadata={"synthetic": True, "risk": ODD})),
        ("turn_start", {"turn": [ODD]}),  # left open: the recovery page plans its end
        ("assistant_message", message("", tool_calls=[{"id": "c2", "name": "echo", "arguments": [ODD]}])),
    ]


@pytest.mark.parametrize("path", ["/sessions/odd/", "/sessions/odd/?view=raw", "/sessions/odd/recovery"])
def test_odd_event_data_reads_as_json_on_every_page(operator, path):
    store(odd_log(), session_id="odd")  # January: stalled, so the recovery page plans
    page = text_of(operator.get(path))
    main = page[page.index('<main id="main">') :]
    for shown in ODD_REPRS:
        assert shown not in main, (path, shown)
    assert "&quot;flag&quot;: true" in main


def test_a_card_names_an_odd_synthetic_risk_in_json():
    store([
        ("assistant_message", message("", tool_calls=[{"id": "c1", "name": "echo"}])),
        ("tool_result", message("x", tool_call_id="c1", metadata={"synthetic": True, "risk": ODD})),
    ], session_id="risky")  # fmt: skip
    window = transcript.latest_window(Session.objects.get(pk="risky"))
    [card] = [card for block in window.blocks for card in block.cards]
    # The ledger reads a risk that is none of recovery's as an unknown outcome (api.md rule 3); the card says what it was.
    assert (card.state, card.stated_risk) == ("tool_outcome_unknown", '{"flag": true, "none": null}')


# c. The audit log reads as words, its targets linked ---------------------------------------


def test_the_audit_log_reads_as_words_with_its_targets_linked(operator, django_user_model):
    project, ops = Project.default(), django_user_model.objects.get(username="ops")
    vera = django_user_model.objects.create_user("vera")
    store([("user_message", message("hi")), ("turn_start", {"turn": 1})], session_id="crashed")
    services.recover(session_id="crashed", user=ops, note="checked the CRM", context=True, abandon=True)
    child = services.fork(session_id="crashed", boundary=0, new_session_id="child")
    services.set_membership(project=project, user=vera, role=Role.VIEWER)
    services.set_membership(project=project, user=vera, role=Role.OPERATOR)
    token_for(vera, Role.OPERATOR, name="ci")
    token_row = vera.api_tokens.get()
    services.revoke_token(token=token_row)

    page = text_of(operator.get("/projects/default/audit"))
    rows = dict(re.findall(r'<tr id="audit-\d+" class="audit-(\w+)">(.*?)</tr>', page, re.S)[::-1])
    details = "".join(re.findall(r'<td class="detail">(.*?)</td>', page))
    assert "{" not in details and "&#x27;" not in details and "True" not in details  # never a dict's repr

    recovery = rows[AuditEntry.RECOVERY]
    assert '<a href="/sessions/crashed/"><code>crashed</code></a>' in recovery
    assert 'appended <a href="/sessions/crashed/?highlight=2-3#seq-2">seqs 2–3</a>' in recovery
    assert "; abandoned; with context;" in recovery and "note: checked the CRM" in recovery
    assert f'into <a href="/sessions/{child.id}/">{child.id}</a>; inheriting seq 0' in rows[AuditEntry.FORK]
    assert "as viewer" in rows[AuditEntry.MEMBER_ADDED] and "from viewer to operator" in rows[AuditEntry.MEMBER_CHANGED]
    assert f'<a href="/projects/default/#member-{vera.pk}"><code>vera</code></a>' in rows[AuditEntry.MEMBER_CHANGED]
    created = rows[AuditEntry.TOKEN_CREATED]
    assert f'<a href="/projects/default/tokens#token-{token_row.pk}"><code>{token_row.prefix}</code></a>' in created
    assert "of vera; named &quot;ci&quot;; scopes " in created and "never expires" in created
    assert "of vera" in rows[AuditEntry.TOKEN_REVOKED]


def test_an_audit_detail_of_an_unknown_shape_still_reads_as_json(operator):
    services.audit(project=Project.default(), actor=None, action=AuditEntry.FORK, target="x", detail={"later": {"a": True}}, actor_name="cli")
    page = text_of(operator.get("/projects/default/audit"))
    assert "later: " + escape('{"a": true}') in page


# d. One seq reads "seq 31", never "seqs 31–31" ---------------------------------------------


def test_a_range_of_one_seq_reads_seq_n_on_every_page_the_message_and_the_cli(operator):
    store([("user_message", message("old")), ("user_message", message("summary", surface_op=["replace", 0, 0])),
           ("turn_start", {"turn": 1})], session_id="s")  # fmt: skip
    detail = text_of(operator.get("/sessions/s/"))
    assert "summary of seq 0<" in detail and "<strong>Summary</strong> of seq 0, standing here in its place" in detail
    recovery = operator.get("/sessions/s/recovery")
    confirmed = operator.post("/sessions/s/recovery", {"digest": recovery.context["digest"], "action": "recover", "abandon": ""}, follow=True)
    after = text_of(confirmed)
    assert "Appended seq 3." in after and ">seq 3</a>" in after
    assert ">seq 3</a>" in text_of(operator.get("/sessions/s/recovery"))
    assert 'appended <a href="/sessions/s/?highlight=3-3#seq-3">seq 3</a>' in text_of(operator.get("/projects/default/audit"))
    pages = detail + after + text_of(operator.get("/sessions/s/recovery")) + text_of(operator.get("/projects/default/audit"))
    assert not re.search(r"seqs (\d+)–\1\b", pages) and not re.search(r">(\d+)–\1<", pages)

    assert "inherits event 0 of" in text_of(operator.get("/sessions/s/fork", {"boundary": "0"}))
    forked = text_of(operator.post("/sessions/s/fork", {"boundary": "0", "id": "s0"}, follow=True))
    assert "into this session: event 0 is inherited." in forked and ": event 0 is inherited (marked" in forked

    store([("user_message", message("hi")), ("turn_start", {"turn": 1})], session_id="t")
    out = io.StringIO()
    call_command("sessions", "recover", "t", "--yes", "--user", "ops", stdout=out)
    assert "appended seq 2." in out.getvalue()


# e. The synthetic badge ends without a colon -----------------------------------------------


def test_the_synthetic_badge_of_a_recovery_note_has_no_trailing_colon(operator, django_user_model):
    store([("user_message", message("hi")), ("turn_start", {"turn": 1})], session_id="s")
    services.recover(session_id="s", user=django_user_model.objects.get(username="ops"), context=True)  # the note for the agent: synthetic, no risk
    page = text_of(operator.get("/sessions/s/"))
    assert '<span class="badge danger">synthetic</span>' in page
    assert "synthetic: <" not in page and "synthetic:<" not in page


# f. A running turn is "open"; "never closed" once the session stalls -----------------------


def test_a_running_turn_reads_open_and_a_stalled_one_never_closed(operator):
    services.create_session(session_id="live")
    append_now("live", [("user_message", message("hi")), ("turn_start", {"turn": 1})])
    running = text_of(operator.get("/sessions/live/"))
    assert '<span class="badge warn">open</span>' in running and "never closed" not in running
    store([("user_message", message("hi")), ("turn_start", {"turn": 1})], session_id="old")  # January: stalled
    assert '<span class="badge warn">open: never closed</span>' in text_of(operator.get("/sessions/old/"))


def test_the_live_frame_after_a_stall_says_never_closed(settings):
    from dashboard.live import sessions as live
    from dashboard.pages import session as session_page

    services.create_session(session_id="live")
    append_now("live", [("user_message", message("hi")), ("turn_start", {"turn": 1})])
    settings.TURNLOG_STALL_SECONDS = 0  # now stalled
    assert "open: never closed" in "".join(live.render_state_frame("live", False, session_page.TRANSCRIPT, True))


# g. A favicon --------------------------------------------------------------------------------


def test_every_page_links_a_favicon_that_the_csp_allows_and_favicon_ico_answers(client, operator):
    assert finders.find("turnlog/favicon.svg")
    for path in ("/login/", "/"):
        page = (client if path == "/login/" else operator).get(path)
        assert '<link rel="icon" href="/static/turnlog/favicon.svg" type="image/svg+xml">' in page.content.decode()
        assert "img-src 'self'" in page["Content-Security-Policy"]
    response = client.get("/favicon.ico")
    assert response.status_code == 302 and response["Location"] == "/static/turnlog/favicon.svg"


# h. An unknown ?status= says it was ignored ------------------------------------------------


def test_an_unknown_status_or_project_filter_says_it_was_ignored(operator):
    store([("user_message", message("hi"))], session_id="s")
    page = text_of(operator.get("/", {"status": "paused"}))
    assert "Ignored the filter status &#x27;paused&#x27; is not one of running, stalled, active, recovered, clean" in page
    assert "/sessions/s/" in page  # every status is shown
    assert "Ignored" not in text_of(operator.get("/", {"status": "clean"}))
    assert "Ignored the filter project &#x27;nope&#x27;" in text_of(operator.get("/", {"project": "nope"}))


# k. One precision per line for relative times ----------------------------------------------


def test_the_recovery_pages_open_turn_line_uses_one_precision(operator):
    store([("user_message", message("hi")), ("turn_start", {"turn": 1})], session_id="s")
    quiet_since = timezone.now() - timedelta(hours=2, minutes=51)
    Session.objects.filter(pk="s").update(last_activity_at=quiet_since, last_event_at=quiet_since)
    page = text_of(operator.get("/sessions/s/recovery"))
    line = re.search(r'<ul class="open-turns">(.*?)</ul>', page, re.S)[1]
    assert "min ago" not in line and "2 h 51 min" not in line
    # Both times of the line are <time data-relative>, which the page's script words alike ("3 h ago").
    assert line.count("data-relative") == 2 and f'datetime="{quiet_since.isoformat()}"' in line


def test_a_bookkeeping_events_data_reads_as_json_cut_like_any_content(operator):
    store([("request_header", {"flag": True, "long": "y " * 3000})], session_id="h")
    page = text_of(operator.get("/sessions/h/"))
    row = page[page.index('<article id="seq-0"') :].split("</article>")[0]
    assert '<pre class="json">{\n  &quot;flag&quot;: true,' in row and "&#x27;flag&#x27;" not in row
    assert 'href="/sessions/h/events/0.json"' in row and "show all (" in row
