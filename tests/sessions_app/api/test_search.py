"""search.py over HTTP (api.md, GET /api/v1/search): words, pieces, order, pages, scoping, notes, forks,
recovery's and imports' events, and refusals. Runs on SQLite (FTS5) and PostgreSQL (tsvector, pg_trgm) alike."""

import pytest

from sessions_app import services
from sessions_app.models import Project, Role
from tests.access import token_for
from tests.conftest import ApiClient
from tests.sessions_app import factories as f
from tests.sessions_app.api.http import append, assert_error, make_session

pytestmark = pytest.mark.django_db


def search(client, q, **params):
    response = client.get("/api/v1/search", {"q": q, **params})
    assert response.status_code == 200, response.content
    return response.json()


def places(body):
    return [(hit["kind"], hit["session_id"], hit["seq"]) for hit in body["items"]]


def test_a_word_finds_every_kind_of_searchable_text_newest_first(api):
    make_session(api, "s1")
    append(api, "s1", [
        f.user("please refund order 1234"),
        f.event("assistant_message", content="", name=None, metadata={}, reasoning_content="the refund needs approval",
                tool_calls=[{"id": "call_9", "name": "issue_refund", "arguments": {"reason": "refund requested"}}]),
        f.tool_result("call_9", content="refund accepted"),
        f.user("thanks"),
    ])
    body = search(api, "Refund")
    assert places(body) == [("event", "s1", 2), ("event", "s1", 1), ("event", "s1", 0)]
    hit = body["items"][0]
    assert set(hit) == {"kind", "session_id", "seq", "type", "note_id", "snippet", "highlights"}
    assert (hit["type"], hit["note_id"], body["next_cursor"]) == ("tool_result", None, None)
    assert [hit["snippet"][s:e] for s, e in hit["highlights"]] == ["refund"]


def test_every_word_must_match(api):
    make_session(api, "s1")
    append(api, "s1", [f.user("alpha beta"), f.user("alpha gamma")])
    assert places(search(api, "alpha gamma")) == [("event", "s1", 1)]
    assert places(search(api, "gamma   ALPHA")) == [("event", "s1", 1)]


def test_a_piece_of_three_characters_matches_inside_short_fields_only(api):
    make_session(api, "s1")
    append(api, "s1", [
        f.event("assistant_message", content="nothing here", name=None, metadata={},
                tool_calls=[{"id": "call_8F3a", "name": "charge_card", "arguments": {"path": "/var/data/ledger.csv"}}]),
        f.user("a long text mentioning harge_car inside prose is not a short field"),
    ])
    assert places(search(api, "8f3")) == [("event", "s1", 0)]
    assert places(search(api, "ge_ca")) == [("event", "s1", 0)]
    assert places(search(api, "data/ledger")) == [("event", "s1", 0)]
    assert search(api, "xyz")["items"] == []
    hit = search(api, "8f3")["items"][0]
    assert [hit["snippet"][s:e] for s, e in hit["highlights"]] == ["8F3"]


def test_query_syntax_is_text(api):
    make_session(api, "s1")
    append(api, "s1", [f.user('say "NEAR" OR AND * ^ -x: col:umn {a b}')])
    for q in ['"', 'NEAR(', "OR", "*", "col:umn", "{a", '"unterminated', "-x", "AND OR NOT", "é́", "\u0301\u0301x"]:
        search(api, q)  # 200, whatever it finds
    assert places(search(api, "NEAR")) == [("event", "s1", 0)]
    assert places(search(api, "col:umn")) == [("event", "s1", 0)]


def test_the_snippet_is_plain_text_that_keeps_markup_as_it_is(api):
    make_session(api, "s1")
    append(api, "s1", [f.user("<script>alert('needle')</script>")])
    hit = search(api, "needle")["items"][0]
    assert "<script>alert('needle')</script>" in hit["snippet"]


def test_an_event_appended_a_moment_ago_is_found(api):
    make_session(api, "s1")
    append(api, "s1", [f.user("first")])
    assert search(api, "zebra")["items"] == []
    append(api, "s1", [f.user("a zebra appears")])
    assert places(search(api, "zebra")) == [("event", "s1", 1)]


def test_pages_follow_the_cursor_to_the_end(api):
    make_session(api, "s1")
    append(api, "s1", [f.user(f"common word {i}") for i in range(7)])
    seen, cursor = [], None
    while True:
        body = search(api, "common", limit=3, **({"cursor": cursor} if cursor else {}))
        seen += places(body)
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert seen == [("event", "s1", seq) for seq in range(6, -1, -1)]


def test_another_projects_hits_never_show(api, django_user_model):
    other = Project.objects.create(slug="other", name="Other")
    stranger = ApiClient(token_for(django_user_model.objects.create_user("stranger"), Role.MEMBER, other))
    make_session(api, "mine")
    append(api, "mine", [f.user("secret plan")])
    make_session(stranger, "theirs", project="other")
    append(stranger, "theirs", [f.user("secret plan too")] * 5)
    assert places(search(api, "secret")) == [("event", "mine", 0)]
    assert places(search(api, "secret", limit=1)) == [("event", "mine", 0)]
    assert search(api, "secret", limit=1)["next_cursor"] is None
    assert search(api, "secret", project="other")["items"] == []
    assert len(search(stranger, "secret")["items"]) == 5
    assert places(search(api, "secret", project="default")) == [("event", "mine", 0)]


def test_notes_are_found_and_follow_their_edits_and_deletion(api):
    make_session(api, "s1")
    append(api, "s1", [f.user("hello"), f.user("hello again")])
    note = api.post("/api/v1/sessions/s1/notes", {"text": "billing confirmed the hello", "tags": ["verified"], "seq": 0}).json()
    body = search(api, "hello")
    assert places(body) == [("note", "s1", 0), ("event", "s1", 1), ("event", "s1", 0)]
    assert (body["items"][0]["note_id"], body["items"][0]["type"]) == (note["id"], None)
    assert places(search(api, "verified")) == [("note", "s1", 0)]
    api.patch(f"/api/v1/notes/{note['id']}", {"text": "changed words"})
    assert search(api, "billing")["items"] == []
    assert places(search(api, "changed")) == [("note", "s1", 0)]
    api.delete(f"/api/v1/notes/{note['id']}")
    assert search(api, "changed")["items"] == []


def test_a_fork_answers_its_prefix_from_the_parent_once(api):
    make_session(api, "parent")
    append(api, "parent", [f.user("inherited words"), f.user("later words")])
    response = api.post("/api/v1/sessions/parent/fork", {"boundary": 0, "id": "child"})
    assert response.status_code == 201, response.content
    append(api, "child", [f.user("own words")])
    assert sorted(places(search(api, "inherited"))) == [("event", "child", 0), ("event", "parent", 0)]
    assert places(search(api, "later")) == [("event", "parent", 1)]
    assert places(search(api, "own")) == [("event", "child", 1)]
    api.post("/api/v1/sessions/child/fork", {"id": "grandchild"})
    assert sorted(places(search(api, "inherited"))) == [("event", s, 0) for s in ("child", "grandchild", "parent")]
    assert sorted(places(search(api, "own"))) == [("event", "child", 1), ("event", "grandchild", 1)]
    paged, cursor = [], None
    while True:  # one parent row, three hits: the cursor walks through them one by one
        body = search(api, "inherited", limit=1, **({"cursor": cursor} if cursor else {}))
        paged += places(body)
        if (cursor := body["next_cursor"]) is None:
            break
    assert sorted(paged) == sorted(places(search(api, "inherited"))) and len(paged) == 3


def test_recovery_synthetic_results_are_indexed(api, django_user_model):
    make_session(api, "crashed")
    append(api, "crashed", [f.event("turn_start", turn=1), f.user("go"), f.assistant(calls=["call_zz9"])])
    staff = django_user_model.objects.create_user("ops", is_staff=True)
    result = services.recover(session_id="crashed", user=staff)
    synthetic = [e.seq for e in result.appended if e.type == "tool_result"]
    assert synthetic and set(synthetic) <= {seq for _, _, seq in places(search(api, "zz9"))}


def test_imported_events_and_notes_are_indexed(api):
    make_session(api, "s1")
    append(api, "s1", [f.user("portable words")])
    api.post("/api/v1/sessions/s1/notes", {"text": "travelling note"})
    blob = api.get("/api/v1/sessions/s1/export").json()
    response = api.post("/api/v1/sessions/import?id=copy", blob)
    assert response.status_code == 201, response.content
    assert sorted(places(search(api, "portable"))) == [("event", "copy", 0), ("event", "s1", 0)]
    assert sorted(places(search(api, "travelling"))) == [("note", "copy", None), ("note", "s1", None)]


@pytest.mark.parametrize(
    ("params", "field"),
    [({"q": ""}, "q"), ({"q": "   "}, "q"), ({"q": "x" * 201}, "q"), ({"q": "a", "cursor": "nope"}, "cursor"),
     ({"q": "a", "cursor": "WzEsIDAsIDNd"}, "cursor")],
)
def test_bad_queries_answer_422_with_the_field(api, params, field):
    body = assert_error(api.get("/api/v1/search", params), 422)
    assert body["field"] == field


@pytest.mark.parametrize("limit", ["0", "201", "x"])
def test_a_bad_limit_answers_422(api, limit):
    assert_error(api.get("/api/v1/search", {"q": "a", "limit": limit}), 422)


def test_a_query_no_stored_text_could_hold_answers_422(api):
    assert_error(api.get("/api/v1/search", {"q": "a\x00b"}), 422, "invalid_text")
