"""The Agents pages against a world of known counts (tests/agents_world.py)."""

from html.parser import HTMLParser
from urllib.parse import urlencode

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from sessions_app import services
from sessions_app.log.events import validate_batch
from tests import agents_world
from tests.agents_world import HTML_NAME

pytestmark = pytest.mark.django_db


class Rows(HTMLParser):
    """The text of each cell (th and td) of each body row of the page's tables, and each row's links."""

    def __init__(self):
        super().__init__()
        self.rows, self.links, self.cell, self.in_body = [], [], None, False

    def handle_starttag(self, tag, attrs):
        if tag == "tbody":
            self.in_body = True
        elif tag == "tr" and self.in_body:
            self.rows.append([])
            self.links.append([])
        elif tag in ("td", "th") and self.in_body:
            self.cell = []
        elif tag == "a" and self.in_body and self.links:
            self.links[-1].append(dict(attrs)["href"])

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self.cell is not None:
            self.rows[-1].append(" ".join("".join(self.cell).split()))
            self.cell = None
        elif tag == "tbody":
            self.in_body = False

    def handle_data(self, data):
        if self.cell is not None:
            self.cell.append(data)


def rows_of(response):
    parser = Rows()
    parser.feed(response.content.decode())
    return parser


@pytest.fixture
def world(django_user_model):
    return agents_world.build(django_user_model.objects.create_user("reader"))


@pytest.fixture
def reader(client, world):
    client.force_login(world.user)
    return client


BOT_FIGURES = ["billing-bot", "4", "7", "6", "20", "3", "8", "50 %", "40 %", "6 min 40 s", "10 min 0 s", "1", "2", "restart_turn ×3, abandon ×1", "1"]


def test_the_agents_page_shows_each_agents_known_counts(reader):
    response = reader.get("/agents/")
    assert response.status_code == 200
    page = rows_of(response)
    nameless, html, bot = page.rows
    assert bot[:15] == BOT_FIGURES
    assert bot[15].startswith("stalled quiet 16 min") and bot[15].endswith("b4")
    assert "/sessions/b4/" in page.links[2]
    assert nameless[:15] == ["(no agent name)", "1", "1", "1", "1", "1", "1", "100 %", "100 %", "3 min 20 s", "3 min 20 s", "0", "1", "restart_turn ×1", "0"]
    assert nameless[15].startswith("recovered") and "after 3 min 20 s stalled" in nameless[15] and "/sessions/nameless/" in page.links[0]
    assert html[:15] == [HTML_NAME, "1", "1", "1", "1", "0", "0", "0 %", "0 %", "—", "—", "0", "0", "—", "0"] and html[15] == "none"
    text = response.content.decode()
    assert HTML_NAME not in text and "&lt;b&gt;x/y &amp; &quot;z&quot;&lt;/b&gt; ?#%" in text  # escaped, never markup
    assert "beta" not in text  # another project's agents and sessions never show


def test_the_table_is_accessible(reader):
    text = reader.get("/agents/").content.decode()
    assert "<caption" in text and '<th scope="row">' in text and '<th scope="colgroup" colspan="2">Crash rate</th>' in text
    assert '<a href="/agents/">Agents</a>' in text  # in the site nav


def test_each_agents_link_round_trips_its_name(reader):
    page = rows_of(reader.get("/agents/"))
    for row, links in zip(page.rows, page.links):
        detail = reader.get(links[0])
        assert detail.status_code == 200, row[0]
        assert rows_of(detail).rows[0][:15] == row[:15]  # the agent's page starts with the same figures
    assert page.links[1][0] == "/agents/agent?" + urlencode({"name": HTML_NAME}).replace("+", "%20")


def test_an_agents_page_lists_its_crashes_newest_first(reader):
    response = reader.get("/agents/agent", {"name": "billing-bot"})
    text = response.content.decode()
    assert '<code>billing-bot</code>' in text
    summary, *crashes = rows_of(response).rows
    assert summary[:15] == BOT_FIGURES
    assert [row[1] for row in crashes] == ["b3", "b2", "b6", "b5"]
    b3, b2, b6, b5 = crashes
    assert b3[2:5] == ["1", "5 min 0 s", "automatic"] and b3[5] == "restart_turn"
    assert b2[4] == "reader" and b6[5] == "restart_turn abandon" and b6[6] == "gave up"
    assert "/sessions/b4/recovery" in text  # stalled now, with its recovery preview
    assert "beta" not in text


def test_the_empty_name_has_a_page(reader):
    response = reader.get("/agents/agent?name=")
    assert response.status_code == 200 and "(no agent name)" in response.content.decode()
    assert [row[1] for row in rows_of(response).rows[1:]] == ["nameless"]


@pytest.mark.parametrize("query", ["", "?name=beta-only", "?name=nobody", "?name=%00"])
def test_an_agent_of_no_readable_project_is_not_found(reader, query):
    assert reader.get("/agents/agent" + query).status_code == 404


def test_a_bad_cursor_is_a_400(reader):
    assert reader.get("/agents/agent", {"name": "billing-bot", "before": "nonsense"}).status_code == 400


def test_older_crashes_are_a_page_away(reader, monkeypatch):
    from sessions_app import selectors

    original = selectors.agent_crashes
    monkeypatch.setattr(selectors, "agent_crashes", lambda *a, **k: original(*a, **{**k, "limit": 3}))
    first = reader.get("/agents/agent", {"name": "billing-bot"})
    (older,) = [link for links in rows_of(first).links for link in links if "before=" in link] or [
        line.split('href="')[1].split('"')[0].replace("&amp;", "&") for line in first.content.decode().splitlines() if "Older crashes" in line
    ]
    assert [row[1] for row in rows_of(reader.get("/agents/agent" + older)).rows[1:]] == ["b5"]


def test_anonymous_users_are_sent_to_log_in(client, world):
    for path in ("/agents/", "/agents/agent?name=billing-bot"):
        response = client.get(path)
        assert response.status_code == 302 and response["Location"].startswith("/login/")


def test_a_user_of_no_project_is_told_what_to_do(client, django_user_model, world):
    client.force_login(django_user_model.objects.create_user("newcomer"))
    text = client.get("/agents/").content.decode()
    assert "You are not a member of any project yet" in text and "billing" not in text


def test_no_agent_yet_says_how_agents_appear(client, django_user_model):
    from tests.access import member

    user = django_user_model.objects.create_user("lonely")
    member(user, "viewer")
    client.force_login(user)
    assert "No agent started a session or a turn in the last 7 days" in client.get("/agents/").content.decode()


def test_the_project_filter(reader, world):
    from tests.access import member

    member(world.user, "viewer", world.beta)
    both = rows_of(reader.get("/agents/")).rows
    assert [row[0] for row in both] == ["(no agent name)", HTML_NAME, "beta-only", "billing-bot"]
    alpha = rows_of(reader.get("/agents/?project=alpha")).rows
    assert alpha[2][:15] == BOT_FIGURES


def test_the_counts_come_from_summaries_not_from_the_logs(reader, world):
    def queries(path):
        with CaptureQueriesContext(connection) as captured:
            assert reader.get(path).status_code == 200
        return len(captured)

    pages = ["/agents/", "/agents/agent?name=billing-bot"]
    before = [queries(path) for path in pages]
    services.append_events(session_id="b1", events=validate_batch(agents_world.turns(150)))  # hundreds of events more
    for n in range(5):  # and more agents and sessions
        agents_world.session(f"more-{n}", world.alpha, f"agent-{n}", agents_world.turns(3, open_last=True))
    assert [queries(path) for path in pages] == before
    assert rows_of(reader.get("/agents/")).rows[-1][3] == "156"  # billing-bot's turns in 24 h: 6 + 150


def test_the_session_header_links_its_agent_page_with_any_name(client, django_user_model):
    from urllib.parse import parse_qs, urlsplit

    from sessions_app import services
    from tests.access import member

    name = '<b>x</b> & "y"/z?'
    services.create_session(session_id="s", agent_name=name)
    user = django_user_model.objects.create_user("reader")
    member(user, role="viewer")
    client.force_login(user)
    page = client.get("/sessions/s/").content.decode()
    assert "<b>x</b>" not in page
    href = page.split('<span class="agent"><span class="muted">agent</span> <a href="', 1)[1].split('"', 1)[0]
    url = urlsplit(href.replace("&amp;", "&"))
    assert url.path == "/agents/agent" and parse_qs(url.query)["name"] == [name]
    assert client.get(href.replace("&amp;", "&")).status_code == 200
