"""The session list as a place to work: duration, tokens, cost and model columns, sorting, the time range, the
model, metadata tag and note tag filters, all in the URL, and bad values answered on the styled page."""

import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from dashboard.pages import session_list
from sessions_app import services
from sessions_app.log.events import validate_batch
from sessions_app.models import Note, Session
from tests.sessions_app import factories as f

pytestmark = pytest.mark.django_db


def spend(session_id: str, input_tokens: int, output_tokens: int, model: str = "gpt-4o", metadata=None) -> Session:
    services.create_session(session_id=session_id, agent_name="bot", metadata=metadata or {})
    usage = {"input_tokens": input_tokens, "output_tokens": output_tokens}
    services.append_events(session_id=session_id, events=validate_batch([f.user(), f.assistant("ok", metadata={"usage": usage, "model": model})]))
    return Session.objects.get(pk=session_id)


def row_ids(page: str) -> list[str]:
    """The sessions the list shows, in order."""
    return re.findall(r'<tr id="session-([^"]+)"', page)


def text_of(response) -> str:
    return response.content.decode()


def test_a_row_shows_duration_tokens_cost_and_model(viewer):
    session = spend("s", 12_000, 3_000)
    Session.objects.filter(pk="s").update(duration_ms=125_000)
    page = text_of(viewer.get("/"))
    row = page[page.index('<tr id="session-s"'):]
    row = row[: row.index("</tr>")]
    assert "2 min 5 s" in row and "15.0k" in row and '<code class="model-name">gpt-4o</code>' in row
    assert f"${session.cost.normalize():f}" in row and session.cost > 0 and "partly priced" not in row
    assert 'title="12,000 input (0 cache read, 0 cache write), 3,000 output (0 reasoning)"' in row


def test_a_session_with_an_unpriced_model_is_marked_partly_priced_naming_it(viewer):
    spend("s", 100, 10, model="house-model-9")
    page = text_of(viewer.get("/"))
    assert "partly priced" in page and 'title="No price for house-model-9: the cost counts only the other models"' in page


def test_header_links_sort_by_cost_largest_first_then_smallest_then_default(viewer):
    spend("cheap", 1000, 10)
    spend("dear", 100_000, 1000)
    spend("middle", 10_000, 100)
    assert row_ids(text_of(viewer.get("/"))) == ["middle", "dear", "cheap"]
    page = text_of(viewer.get("/"))
    assert 'href="?status=&amp;q=&amp;project=&sort=-cost"' in page
    by_cost = text_of(viewer.get("/", {"sort": "-cost"}))
    assert row_ids(by_cost) == ["dear", "middle", "cheap"] and 'aria-sort="descending"' in by_cost
    assert 'href="?status=&amp;q=&amp;project=&sort=cost"' in by_cost
    assert row_ids(text_of(viewer.get("/", {"sort": "cost"}))) == ["cheap", "middle", "dear"]
    assert row_ids(text_of(viewer.get("/", {"sort": "-tokens"}))) == ["dear", "middle", "cheap"]


def test_sorting_by_duration_and_its_next_page_keep_the_filters(viewer):
    for i in range(55):
        services.create_session(session_id=f"s{i:02}", metadata={"env": "prod"})
        Session.objects.filter(pk=f"s{i:02}").update(duration_ms=i * 1000)
    page = text_of(viewer.get("/", {"sort": "-duration", "tag": "env:prod"}))
    assert row_ids(page)[:3] == ["s54", "s53", "s52"] and len(row_ids(page)) == 50
    more = re.search(r'<tr id="more-rows"><td colspan="11"><a href="\?([^"]+)"', page).group(1).replace("&amp;", "&")
    assert "sort=-duration" in more and "tag=env%3Aprod" in more
    rest = text_of(viewer.get(f"/?{more}"))
    assert row_ids(rest) == ["s04", "s03", "s02", "s01", "s00"]


def test_the_model_filter_lists_the_sessions_that_used_it_and_suggests_models(viewer):
    spend("four", 10, 1, model="gpt-4o")
    spend("mini", 10, 1, model="gpt-4o-mini")
    page = text_of(viewer.get("/", {"model": "gpt-4o-mini"}))
    assert row_ids(page) == ["mini"] and 'value="gpt-4o-mini"' in page
    assert '<option value="gpt-4o">' in page and '<option value="gpt-4o-mini">' in page
    assert row_ids(text_of(viewer.get("/", {"model": "o3"}))) == []


@pytest.mark.parametrize(
    ("tag", "expected"),
    [("env:prod", ["a"]), ("env", ["b", "a"]), ("n:5", ["b"]), ("team:ops", []), ("weird key/ü:ä\"x", ["c"])],
)
def test_the_metadata_tag_filter_matches_a_key_or_a_key_and_its_value(viewer, tag, expected):
    services.create_session(session_id="a", metadata={"env": "prod"})
    services.create_session(session_id="b", metadata={"env": "staging", "n": 5})
    services.create_session(session_id="c", metadata={"weird key/ü": 'ä"x'})
    assert row_ids(text_of(viewer.get("/", {"tag": tag}))) == expected


def test_the_note_tag_filter_lists_the_sessions_with_a_note_so_tagged(viewer):
    for sid in ("a", "b", "c"):
        services.create_session(session_id=sid)
    Note.objects.create(session_id="a", text="x", tags=["billing", "bug"], author_name="ann")
    Note.objects.create(session_id="b", text="y", tags=["bugs"], author_name="ann")
    assert row_ids(text_of(viewer.get("/", {"note_tag": "bug"}))) == ["a"]
    assert row_ids(text_of(viewer.get("/", {"note_tag": "nothing"}))) == []


def test_the_time_range_keeps_sessions_active_in_it(viewer):
    now = timezone.now()
    spans = {"recent": (now - timedelta(minutes=90), now - timedelta(minutes=10)),
             "yesterday": (now - timedelta(hours=30), now - timedelta(hours=20)),
             "old": (datetime(2026, 1, 5, 10, tzinfo=UTC), datetime(2026, 1, 5, 11, tzinfo=UTC))}  # fmt: skip
    for sid, (created, last) in spans.items():
        services.create_session(session_id=sid)
        Session.objects.filter(pk=sid).update(created_at=created, last_activity_at=last)
    assert row_ids(text_of(viewer.get("/", {"range": "hour"}))) == ["recent"]
    assert row_ids(text_of(viewer.get("/", {"range": "day"}))) == ["recent", "yesterday"]
    assert row_ids(text_of(viewer.get("/", {"range": "week"}))) == ["recent", "yesterday"]
    between = text_of(viewer.get("/", {"range": "between", "from": "2026-01-05", "to": "2026-01-05"}))
    assert row_ids(between) == ["old"] and 'value="2026-01-05"' in between
    assert row_ids(text_of(viewer.get("/", {"from": "2026-01-05T10:30", "to": "2026-01-05T10:45"}))) == ["old"]
    assert row_ids(text_of(viewer.get("/", {"from": "2026-01-05T11:30"}))) == ["recent", "yesterday"]


@pytest.mark.parametrize(
    ("query", "said"),
    [
        ({"sort": "price"}, "sort &#x27;price&#x27; is not one of cost, -cost"),
        ({"range": "month"}, "range &#x27;month&#x27; is not one of hour, day, week, between"),
        ({"from": "yesterday"}, "from &#x27;yesterday&#x27; is not a date"),
        ({"from": "2026-02-02", "to": "2026-01-01"}, "from 2026-02-02 is after to 2026-01-01"),
        ({"range": "between"}, "range between needs a from or a to instant"),
        ({"tag": ":x"}, "names no metadata key"),
        ({"model": "m" * 201}, "model must be text of at most 200 characters"),
        ({"sort": "-cost", "cursor": "garbage!"}, "is not one this API returned"),
    ],
)
def test_a_bad_filter_answers_400_on_the_styled_page_saying_what_is_wrong(viewer, query, said):
    services.create_session(session_id="s")
    response = viewer.get("/", query)
    page = text_of(response)
    assert response.status_code == 400 and response["Content-Type"].startswith("text/html")
    assert "This page cannot read its address" in page and said in page and "<nav" in page  # the site's own page, styled
    assert row_ids(page) == []


def test_every_filter_is_kept_in_the_url_of_the_live_socket_and_the_clear_link(viewer):
    services.create_session(session_id="s", metadata={"env": "prod"})
    page = text_of(viewer.get("/", {"sort": "-cost", "model": "gpt-4o", "tag": "env:prod", "note_tag": "bug", "range": "week"}))
    socket = re.search(r'ws-connect="([^"]+)"', page).group(1).replace("&amp;", "&")
    assert socket == "/ws/sessions/live?status=&q=&project=&sort=-cost&model=gpt-4o&tag=env%3Aprod&note_tag=bug&range=week"
    assert '<details class="more-filters" open>' in page and ">Clear</a>" in page


def test_the_view_reads_back_what_it_writes():
    view = session_list.read_view({"sort": "tokens", "tag": "k:v", "from": "2026-01-05", "to": "2026-01-06T12:00"})
    assert view.narrow.since == datetime(2026, 1, 5, tzinfo=UTC) and view.narrow.until == datetime(2026, 1, 6, 12, tzinfo=UTC)
    assert session_list.read_view(view.params()) == view
    # Sorted smallest first already: the header's next click is the default order.
    assert view.sort_links["tokens"] == "tag=k%3Av&range=between&from=2026-01-05&to=2026-01-06T12%3A00"
    assert session_list.read_view({}).sort_links["cost"] == "sort=-cost"
    assert Decimal(0) == session_list.stored_bill(Session(id="x")).cost
