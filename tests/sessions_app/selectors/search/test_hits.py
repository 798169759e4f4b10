"""hits.py: the index's matching rows, newest first, in the given projects; on PostgreSQL the same page whether
a word is read as rare (through the GIN index) or as common (walking the key)."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessions_app.log import search_text
from sessions_app.log.events import validate_batch
from sessions_app.models import Event, Project
from sessions_app.selectors.search import hits
from sessions_app.services import appends
from sessions_app.services.search import index_pending
from tests.sessions_app import factories as f

pytestmark = pytest.mark.django_db


@pytest.fixture
def world():
    default, other = Project.objects.get(slug="default"), Project.objects.create(slug="other", name="Other")
    for session_id, project in (("a", default), ("b", other), ("c", default)):
        appends.create_session(session_id=session_id, project=project)
        appends.append_events(session_id=session_id, events=validate_batch(
            [f.user("common word"), f.assistant(calls=["call_x1"]), f.user("common again"), f.tool_result("call_x1")]
        ))
    index_pending(wait=True)
    return default.pk, other.pk


def ids(session_id, *seqs):
    return list(Event.objects.filter(session_id=session_id, seq__in=seqs).order_by("-id").values_list("id", flat=True))


@pytest.mark.parametrize("rare", [hits.RARE, 2])
def test_a_page_is_the_newest_matches_in_the_projects_whichever_way_it_is_read(world, monkeypatch, rare):
    monkeypatch.setattr(hits, "RARE", rare)
    default, other = world
    everything = hits.event_ids(search_text.parse_query("common"), [default, other], bound=2**63 - 1, limit=100)
    assert everything == sorted(ids("a", 0, 2) + ids("b", 0, 2) + ids("c", 0, 2), reverse=True)
    mine = hits.event_ids(search_text.parse_query("common"), [default], bound=2**63 - 1, limit=3)
    assert mine == (ids("c", 0, 2) + ids("a", 0, 2))[:3]
    below = hits.event_ids(search_text.parse_query("common"), [default], bound=mine[-1] - 1, limit=3)
    assert below == ids("a", 0, 2)[1:]
    pieces = hits.event_ids(search_text.parse_query("ll_x"), [default], bound=2**63 - 1, limit=100)
    assert pieces == sorted(ids("a", 1, 3) + ids("c", 1, 3), reverse=True)


def test_no_project_reads_nothing(world):
    assert hits.event_ids(search_text.parse_query("common"), [Project.objects.create(slug="empty").pk], bound=2**63 - 1, limit=10) == []


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(q=st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"), min_size=1, max_size=search_text.QUERY_MAX))
def test_no_query_is_a_database_error(world, q):
    query = search_text.parse_query(q)
    hits.event_ids(query, list(world), bound=2**63 - 1, limit=5)
    hits.note_keys(query, list(world), bound=(2**63 - 1, 2**63 - 1), limit=5)
