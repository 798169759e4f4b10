"""The fleet page (/calls/): filters, paging, links to the card and the recovery preview, escaping, scoping."""

import re
from datetime import UTC, datetime, timedelta

import pytest
from django.test import Client
from django.utils import timezone

from sessions_app import services
from sessions_app.log.events import validate_batch
from sessions_app.models import LedgerCall, Project, Session
from tests.access import member

pytestmark = pytest.mark.django_db

CRASH = [
    {"type": "turn_start", "data": {"turn": 1}},
    {"type": "assistant_message", "data": {"content": "", "tool_calls": [{"id": "p1", "name": "charge_card", "arguments": {"cents": 500}}]}},
    {"type": "tool_call", "data": {"id": "p1", "name": "charge_card"}},
]


def store(session_id: str, events: list[dict], project=None, agent: str = "billing-bot") -> None:
    services.create_session(session_id=session_id, agent_name=agent, project=project)
    services.append_events(session_id=session_id, events=validate_batch(events))


def stalled(session_id: str) -> None:
    hour_ago = timezone.now() - timedelta(hours=1)
    Session.objects.filter(pk=session_id).update(last_activity_at=hour_ago, last_received_at=hour_ago)
    LedgerCall.objects.filter(session_id=session_id).update(sighted_at=hour_ago)


@pytest.fixture
def browser(django_user_model):
    user = django_user_model.objects.create_user("support")
    member(user)
    client = Client()
    client.force_login(user)
    return client


def rows(html: str) -> list[str]:
    return re.findall(r'<tr id="call-([^"]+)"', html)


def test_the_page_lists_the_calls_to_check_with_links_to_the_card_and_the_recovery_preview(browser):
    store("crashed", CRASH)
    stalled("crashed")
    store("running", CRASH)
    page = browser.get("/calls/").content.decode()
    assert rows(page) == ["crashed--p1"]
    assert 'href="/sessions/crashed/#seq-1"' in page and 'href="/sessions/crashed/recovery"' in page
    assert "tool_outcome_unknown" in page and "charge_card" in page and "{&quot;cents&quot;: 500}" in page
    assert 'href="/calls/"' in page  # the nav links the page
    assert 'ws-connect="/ws/calls/live?"' in page


def test_filters_narrow_the_list_and_unusable_ones_are_said(browser):
    store("a", CRASH, agent="billing-bot")
    store("b", CRASH, agent="other-bot")
    assert rows(browser.get("/calls/?state=pending&agent=other-bot").content.decode()) == ["b--p1"]
    assert rows(browser.get("/calls/?state=pending&tool=charge_card").content.decode()) == ["b--p1", "a--p1"]
    assert rows(browser.get("/calls/?state=pending&class=read_only").content.decode()) == []
    page = browser.get("/calls/?state=maybe&since=yesterday").content.decode()
    assert "Ignored the filter state &#x27;maybe&#x27;" in page and "Ignored the filter since" in page


def test_older_calls_page_with_a_cursor_and_keep_the_filters(browser):
    for i in range(55):
        store(f"s{i:02}", CRASH[1:2])
    first = browser.get("/calls/?state=pending").content.decode()
    assert len(rows(first)) == 50
    more = re.search(r'<tr id="more-calls"><td colspan="9"><a href="\?([^"]+)"', first).group(1).replace("&amp;", "&")
    assert "state=pending" in more
    second = browser.get("/calls/?" + more, headers={"HX-Request": "true", "HX-Target": "more-calls"}).content.decode()
    assert len(rows(second)) == 5 and "<html" not in second
    assert not set(rows(first)) & set(rows(second))


def test_event_data_is_shown_escaped(browser):
    store("x", [{"type": "assistant_message", "data": {"content": "", "tool_calls": [{"id": "<b>", "name": "<script>alert(1)</script>", "arguments": {"q": "<img src=x>"}}]}}])
    page = browser.get("/calls/?state=pending").content.decode()
    assert "<script>alert(1)" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<img src=x>" not in page and "<b>" not in page


def test_another_projects_calls_never_show(browser):
    other = Project.objects.create(slug="other", name="Other")
    store("theirs", CRASH, project=other)
    store("ours", CRASH)
    stalled("theirs")
    stalled("ours")
    assert rows(browser.get("/calls/").content.decode()) == ["ours--p1"]
    page = browser.get("/calls/?project=other").content.decode()
    assert rows(page) == ["ours--p1"] and "is not a project of yours" in page


def test_the_page_needs_a_login(client):
    assert client.get("/calls/")["Location"].startswith("/login/")


def test_the_filters_are_checkbox_groups_and_utc_date_inputs_holding_what_was_chosen(browser):
    page = browser.get("/calls/?state=pending&state=error&class=read_only&since=2026-01-02T03:04:05%2B02:00").content.decode()
    assert "<select name=\"state\"" not in page and " multiple" not in page
    checked = set(re.findall(r'<input type="checkbox" name="(state|class)" value="([^"]+)" checked>', page))
    assert checked == {("state", "pending"), ("state", "error"), ("class", "read_only")}
    assert re.search(r'<fieldset class="choices" id="filter-state"><legend>State</legend>', page)
    # An older link's time with an offset still applies; the input shows it in UTC, as its legend says.
    assert '<legend>First sighted, in UTC</legend>' in page
    assert '<input type="datetime-local" name="since" value="2026-01-02T01:04:05" step="1">' in page
    assert '<input type="datetime-local" name="until" value="" step="1">' in page
    assert "Ignored the filter" not in page


@pytest.mark.parametrize("value, moment", [
    ("2026-01-02T03:04", "2026-01-02T03:04:00"),  # what a datetime-local input sends: read as UTC
    ("2026-01-02T03:04:05", "2026-01-02T03:04:05"),
    ("2026-01-02", "2026-01-02T00:00:00"),  # a date alone: its first instant, UTC
    ("2026-01-02T03:04:05Z", "2026-01-02T03:04:05"),  # links made before: ISO 8601 with Z or an offset
    ("2026-01-02T05:04:05+02:00", "2026-01-02T03:04:05"),
])  # fmt: skip
def test_since_and_until_read_a_date_inputs_value_as_utc_and_older_iso_links_alike(browser, value, moment):
    page = browser.get("/calls/", {"since": value, "until": value}).content.decode()
    assert f'name="since" value="{moment}"' in page and f'name="until" value="{moment}"' in page
    assert "Ignored the filter" not in page


def test_a_date_input_value_narrows_the_list_in_utc(browser):
    store("old", CRASH)
    LedgerCall.objects.filter(session_id="old").update(sighted_at=datetime(2026, 1, 2, 3, 0, tzinfo=UTC))
    store("new", CRASH)
    LedgerCall.objects.filter(session_id="new").update(sighted_at=datetime(2026, 1, 2, 5, 0, tzinfo=UTC))
    assert rows(browser.get("/calls/?state=pending&since=2026-01-02T04:00").content.decode()) == ["new--p1"]
    assert rows(browser.get("/calls/?state=pending&until=2026-01-02T04:00").content.decode()) == ["old--p1"]
    page = browser.get("/calls/?since=2026-02-30T00:00").content.decode()
    assert "Ignored the filter since &#x27;2026-02-30T00:00&#x27;" in page
