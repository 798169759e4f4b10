"""search_hits.py and the session list's search box: hits in the logs and notes with escaped, marked snippets,
each linking to its event; the box's other filtering (id, agent, tool) unchanged; scoped to the user's projects."""

import pytest
from django.utils.html import escape

from dashboard.pages.search import marked
from sessions_app import services
from sessions_app.log.events import validate_batch
from sessions_app.models import Project, Role
from tests.access import member
from tests.sessions_app import factories as f

pytestmark = pytest.mark.django_db


@pytest.fixture
def viewer(client, django_user_model):
    user = django_user_model.objects.create_user("viewer")
    member(user, Role.VIEWER)
    client.force_login(user)
    return client


def store(session_id, items, project=None):
    services.create_session(session_id=session_id, agent_name="billing-bot", project=project)
    services.append_events(session_id=session_id, events=validate_batch(items))


def test_marked_escapes_every_piece_and_wraps_only_the_highlights():
    assert marked("<b>refund</b> & more", [(3, 9)]) == "&lt;b&gt;<mark>refund</mark>&lt;/b&gt; &amp; more"
    assert marked("<script>x</script>", []) == escape("<script>x</script>")


def test_the_search_box_lists_hits_that_link_to_their_events(viewer):
    store("s1", [f.user("hello"), f.user("<script>alert('refund')</script>")])
    html = viewer.get("/?q=refund").content.decode()
    assert '<a href="/sessions/s1/#seq-1"><code>s1</code> · seq 1 · user_message</a>' in html
    assert "&lt;script&gt;alert(&#x27;<mark>refund</mark>&#x27;)&lt;/script&gt;" in html
    assert "<script>alert(" not in html


def test_the_box_still_filters_sessions_by_id_agent_and_tool(viewer):
    store("s1", [f.user("hello")])
    store("other", [f.assistant(calls=["c7"])])
    rows = viewer.get("/?q=tool_c7", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="session-rows").content.decode()
    assert "session-other" in rows and "session-s1" not in rows
    assert 'id="session-s1"' in viewer.get("/?q=s1").content.decode()


def test_the_hits_section_alone_answers_its_swap_and_pages_with_more_matches(viewer):
    store("s1", [f.user(f"needle {i}") for i in range(25)])
    section = viewer.get("/?q=needle", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="search-hits").content.decode()
    assert section.lstrip().startswith('<section id="search-hits"') and section.count('class="hit"') == 20
    assert "#seq-24" in section and 'id="more-hits"' in section
    cursor = section.split("hits_cursor=")[1].split('"')[0]
    more = viewer.get(f"/?q=needle&hits_cursor={cursor}", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="more-hits").content.decode()
    assert more.count('class="hit"') == 5 and "#seq-0" in more and "more-hits" not in more


def test_hits_of_a_project_the_user_cannot_read_never_show(viewer):
    store("mine", [f.user("shared word")])
    store("theirs", [f.user("shared word")], project=Project.objects.create(slug="other", name="Other"))
    html = viewer.get("/?q=shared").content.decode()
    assert "/sessions/mine/#seq-0" in html and "theirs" not in html


def test_an_empty_or_over_long_box_shows_no_hits_section_content(viewer):
    store("s1", [f.user("hello")])
    assert "In the logs and notes" not in viewer.get("/").content.decode()
    assert "In the logs and notes" not in viewer.get("/?q=" + "x" * 201).content.decode()


def test_a_query_that_is_a_calls_key_or_receipt_lists_that_call_linking_to_its_card(viewer):
    from sessions_app.models import ToolPolicy

    ToolPolicy.objects.create(pattern="charge_*", side_effect="external_effect", receipt_pointer="/id")
    call = {"id": "c1", "name": "charge_card", "arguments": {"idempotency_key": "order-42<b>"}}
    store("s1", [
        {"type": "assistant_message", "data": {"content": "", "tool_calls": [call]}},
        {"type": "tool_result", "data": {"tool_call_id": "c1", "content": '{"id": "ch_3Px"}'}},
    ])  # fmt: skip
    for q in ("ch_3Px", "order-42<b>", " ch_3Px "):
        html = viewer.get("/", {"q": q}).content.decode()
        assert "<h2>Calls with this reference</h2>" in html, q
        assert '<a href="/sessions/s1/#seq-0"><code>s1</code> · seq 0 · call</a>' in html
    html = viewer.get("/", {"q": "order-42<b>"}).content.decode()
    assert "key: <mark>order-42&lt;b&gt;</mark> · receipt: ch_3Px" in html
    assert "Calls with this reference" not in viewer.get("/", {"q": "ch_3P"}).content.decode()  # exactly
