"""Bad query parameters on pages: the site's styled 400 page, naming the parameter and what was wrong; never plain
text, never a 500. One case per page that answers a 400 (grep dashboard/pages for refusals.bad_request)."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from sessions_app import services
from sessions_app.lib.params import MAX_DIGITS
from sessions_app.models import Project, Role
from tests.access import member
from tests.sessions_app.services.test_recovery import store

pytestmark = pytest.mark.django_db

TOO_LONG = "9" * (MAX_DIGITS + 1)

# (path, query, the parameter named, words of the reason)
BAD = [
    ("/", {"cursor": "garbage"}, "cursor", 'cursor "garbage" is not one'),
    ("/", {"q": "hello", "hits_cursor": "garbage"}, "hits_cursor", "is not one this search gave"),
    ("/sessions/s/pages", {}, "turn", "give ?turn= and ?page= (numbers), or ?seq="),
    ("/sessions/s/pages", {"turn": "x", "page": "1"}, "turn", "give ?turn= and ?page="),
    ("/sessions/s/", {"view": "raw", "before": TOO_LONG}, "before", f"before must be a number of at most {MAX_DIGITS:,} digits"),
    ("/sessions/s/", {"highlight": f"{TOO_LONG}-1"}, "highlight", "highlight must be a number"),
    ("/calls/", {"cursor": "garbage"}, "cursor", 'cursor "garbage" is not one'),
    ("/agents/agent", {"name": "billing-bot", "before": "garbage"}, "before", 'cursor "garbage" is not one'),
    ("/projects/team/audit", {"action": "bogus"}, "action", "'bogus' is not one of "),
    ("/projects/team/audit", {"cursor": "garbage"}, "cursor", 'cursor "garbage" is not one'),
]


@pytest.fixture
def admin_client(django_user_model):
    user = django_user_model.objects.create_user("alice")
    team = Project.objects.create(slug="team", name="The Team")
    member(user, Role.ADMIN, team)
    member(user, Role.ADMIN)
    store([("user_message", {"content": "hi"})], session_id="s")
    services.create_session(session_id="crashy", agent_name="billing-bot")
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.parametrize("path, query, parameter, reason", BAD, ids=[f"{p} {next(iter(q), '')}".strip() for p, q, *_ in BAD])
def test_a_bad_query_parameter_gets_the_styled_page_naming_it_and_why(admin_client, path, query, parameter, reason):
    response = admin_client.get(path, query)
    assert response.status_code == 400
    assert response["Content-Type"].startswith("text/html")
    page = response.content.decode()
    assert '<header class="topbar">' in page and "<h1>This page cannot read its address</h1>" in page
    named = re.search(r'<code class="bad-parameter">([^<]*)</code>', page)
    assert named and named[1] == parameter
    detail = re.search(r'<span class="bad-detail">([^<]*)</span>', page)[1]
    assert reason in detail.replace("&quot;", '"').replace("&#x27;", "'")
    assert f'href="{path}"' in page  # the way back: the same page without its parameters


def test_the_400_page_escapes_what_it_was_given(admin_client):
    page = admin_client.get("/projects/team/audit", {"action": "<script>alert(1)</script>"}).content.decode()
    assert "<script>alert(1)" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_a_bad_cursor_on_the_api_stays_json(admin_client):
    """The API answers its own errors in its shape; the page's 400 is for pages."""
    response = admin_client.get("/api/v1/sessions", {"cursor": "garbage"})
    assert response.status_code in (400, 401, 422) and response["Content-Type"].startswith("application/json")


# Every parameter the list, timeline, comparison, prices and calls pages read, each given values a person or a
# script may send: the page answers, or refuses with a 4xx; never a 5xx (checked on both backends in CI).
PARAMETERS = [
    ("/", ["sort", "range", "from", "to", "model", "tag", "note_tag", "cursor", "status", "q", "project"]),
    ("/sessions/s/timeline", ["turn"]),
    ("/sessions/s/compare", ["with"]),
    ("/projects/team/prices", ["model"]),
    ("/calls/", ["since", "until", "state", "class", "cursor", "tool"]),
    ("/agents/", ["days"]),
]
HOSTILE = ["", " ", "\x00", "x" * 5000, "-1", "9" * 400, "1e309", "NaN", "<script>x</script>", "😀", "2026-13-45", "2026-02-30T25:61",
           ":", "a:b:c", "-cost,cost", "../../etc", "%00"]  # fmt: skip


@pytest.mark.parametrize("path, names", PARAMETERS, ids=[p for p, _ in PARAMETERS])
def test_no_hostile_value_of_a_page_s_parameters_gives_a_5xx(admin_client, path, names):
    for name in names:
        for value in HOSTILE:
            response = admin_client.get(path, {name: value})
            assert response.status_code < 500, (path, name, value, response.status_code)
            assert "<script>x</script>" not in response.content.decode(errors="replace"), (path, name)
