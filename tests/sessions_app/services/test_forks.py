"""Forks through storage and the API (session-log.md section 5, api.md Forks)."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessions_app import selectors, services
from sessions_app.log import fold, fork, recovery
from sessions_app.log.events import validate_batch
from sessions_app.log.structure import place_all
from sessions_app.models import CallSighting, Event, Session
from tests.sessions_app.log.strategies import logs, message
from tests.sessions_app.log.test_recovery import WORKED_EXAMPLE, assistant, result
from tests.sessions_app.services.test_recovery import store

pytestmark = pytest.mark.django_db

# 0 user, 1 turn_start, 2 assistant(a), 3 result(a), 4 turn_end, 5 user, 6 turn_start, 7 assistant(b)  (open)
CRASHED = [
    ("user_message", message("first")),
    ("turn_start", {"turn": 1}),
    assistant("a"),
    result("a"),
    ("turn_end", {"turn": 1, "steps": 0, "reason": "complete"}),
    ("user_message", message("second")),
    ("turn_start", {"turn": 2}),
    assistant("b"),
]


def fork_over_api(api, session_id, **body):
    return api.post(f"/api/v1/sessions/{session_id}/fork", body)


@pytest.mark.parametrize(
    "boundary, seed_length",
    [(0, 1), (4, 5), (5, 6)],
    ids=["zero, just before turn 1 opens", "the turn_end closing turn 1", "just before turn 2 opens"],
)
def test_allowed_boundaries_copy_the_prefix(api, boundary, seed_length):
    store(CRASHED, session_id="p")
    response = fork_over_api(api, "p", boundary=boundary, id="child")
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["parent"] == {"session_id": "p", "seed_length": seed_length}
    assert body["event_count"] == seed_length and body["open_turns"] == []
    parent_events = api.get("/api/v1/sessions/p/events").json()["events"]
    assert api.get("/api/v1/sessions/child/events").json()["events"] == parent_events[:seed_length]


@pytest.mark.parametrize("boundary", [1, 2, 3, 6, 7, "last"])
def test_a_boundary_inside_an_open_turn_is_refused_with_suggestions(api, boundary):
    store(CRASHED, session_id="p")
    body = fork_over_api(api, "p", boundary=boundary).json()
    inside_first_turn = boundary in (1, 2, 3)
    assert body["error"] == "open_turn"
    assert body["seq"] == (1 if inside_first_turn else 6)
    assert body["valid_boundaries"] == ({"before": 0, "after": 4} if inside_first_turn else {"before": 5, "after": None})
    last = 7 if boundary == "last" else boundary
    if inside_first_turn:  # turn 1 closed at seq 4: nothing to recover, the boundary is just inside it
        assert body["detail"].startswith(f"seq {last} is inside turn 1, which opened at seq 1 and closes at seq 4;")
    else:
        assert body["detail"].startswith(f"seq {last} is inside turn 2, opened at seq 6 and still open; recover")
    assert Session.objects.count() == 1


def test_an_absent_boundary_means_last_and_after_recovery_it_is_allowed(api, django_user_model):
    store(CRASHED, session_id="p")
    assert fork_over_api(api, "p").json()["error"] == "open_turn"
    services.recover(session_id="p", user=django_user_model.objects.create_user("ops"))
    response = fork_over_api(api, "p", id="whole")
    assert response.status_code == 201
    assert response.json()["parent"]["seed_length"] == 10
    assert response.json()["interrupted"] is False


@pytest.mark.parametrize("boundary", [-1, 2.5, 3.0, "first", "3", None, True, [1], {}])
def test_an_invalid_boundary_is_refused(api, boundary):
    store(CRASHED, session_id="p")
    body = fork_over_api(api, "p", boundary=boundary).json()
    assert (body["error"], body["boundary"]) == ("invalid_boundary", boundary)
    assert Session.objects.count() == 1


def test_a_boundary_past_the_end_names_the_count(api):
    store(CRASHED, session_id="p")
    body = fork_over_api(api, "p", boundary=8).json()
    assert (body["error"], body["boundary"], body["count"]) == ("boundary_out_of_range", 8, 8)


def test_an_empty_log_forks_to_an_empty_session(api):
    store([], session_id="empty")
    body = fork_over_api(api, "empty", id="e2").json()
    assert body["event_count"] == 0 and body["parent"] == {"session_id": "empty", "seed_length": 0}
    assert fork_over_api(api, "empty", boundary=0).json()["error"] == "boundary_out_of_range"


def test_fork_errors_404_and_409(api):
    store(CRASHED, session_id="p")
    assert fork_over_api(api, "ghost").status_code == 404
    assert fork_over_api(api, "p", boundary=0, id="p").json()["error"] == "session_exists"
    assert fork_over_api(api, "p", boundary=0, id="bad id").status_code == 422
    assert Session.objects.count() == 1


def test_a_fork_of_a_fork_points_at_its_immediate_parent_and_continues_its_own_seqs(api):
    store(CRASHED, session_id="p")
    fork_over_api(api, "p", boundary=5, id="child")
    api.post("/api/v1/sessions/child/events", {"events": [{"type": "user_message", "data": message("mine")}]})
    grandchild = fork_over_api(api, "child", boundary=6, id="grandchild").json()
    assert grandchild["parent"] == {"session_id": "child", "seed_length": 7}
    assert [e["data"].get("content") for e in api.get("/api/v1/sessions/grandchild/events").json()["events"]][-2:] == ["second", "mine"]
    found = selectors.lineage(Session.objects.get(pk="child"))
    assert [s.id for s in found.ancestors] == ["p"]
    assert [(s.id, depth) for s, depth in found.descendants] == [("grandchild", 1)]
    assert [(s.id, d) for s, d in selectors.lineage(Session.objects.get(pk="p")).descendants] == [("child", 1), ("grandchild", 2)]


def test_compaction_ranges_survive_the_copy(api):
    items = [("user_message", message(str(i))) for i in range(4)] + [
        ("user_message", message("summary", surface_op=["replace", 0, 2])),
        ("user_message", message("after")),
    ]
    store(items, session_id="p")
    fork_over_api(api, "p", boundary=4, id="child")
    parent_log = selectors.session_log(Session.objects.get(pk="p"))
    child_log = selectors.session_log(Session.objects.get(pk="child"))
    assert fold.fold(child_log) == fold.fold(parent_log[:5])
    assert api.get("/api/v1/sessions/child/messages").json()["messages"][0]["content"] == "summary"


def test_the_fork_keeps_structure_and_sightings_so_its_own_recovery_is_right():
    store([*WORKED_EXAMPLE[:7], ("turn_end", {"turn": 1, "steps": 1, "reason": "complete"})], session_id="p")
    child = services.fork(session_id="p", new_session_id="c")
    assert list(Event.objects.filter(session=child).order_by("seq").values_list("seq", "turn_seq", "step_seq")) == list(
        Event.objects.filter(session_id="p").order_by("seq").values_list("seq", "turn_seq", "step_seq")
    )
    assert CallSighting.objects.filter(session=child).count() == CallSighting.objects.filter(session_id="p").count() == 2
    services.append_events(session_id="c", events=validate_batch([{"type": "turn_start", "data": {"turn": 2}}, {"type": "assistant_message", "data": {"tool_calls": [{"id": "c1"}, {"id": "z"}]}}]))
    forked = Session.objects.get(pk="c")
    assert selectors.recovery_plan(forked) == recovery.plan(selectors.session_log(forked))


def test_the_copy_is_one_statement_not_one_per_event():
    counts = {}
    for size in (3, 300):
        store([("user_message", message(str(i))) for i in range(size)], session_id=f"big-{size}")
        with CaptureQueriesContext(connection) as queries:
            services.fork(session_id=f"big-{size}", boundary=size - 1, new_session_id=f"copy-{size}")
        counts[size] = len(queries)
        assert Event.objects.filter(session_id=f"copy-{size}").count() == size
    assert counts[3] == counts[300] < 20


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(events=logs(), data=st.data())
def test_the_stored_fork_rules_equal_the_pure_rules(events, data):
    session = store(events)
    boundary = data.draw(st.one_of(st.just("last"), st.integers(0, len(events) + 1)))
    try:
        expected_prefix = fork.fork_prefix(events, boundary)
    except fork.ForkRefused as expected:
        with pytest.raises(fork.ForkRefused) as refused:
            services.fork(session_id=session.id, boundary=boundary)
        assert (refused.value.code, refused.value.detail) == (expected.code, expected.detail)
        if expected.code == "open_turn":
            seq = len(events) - 1 if boundary == "last" else boundary
            before, after = fork.valid_boundaries(events, seq)
            assert refused.value.fields == {**expected.fields, "valid_boundaries": {"before": before, "after": after}}
        return
    child = services.fork(session_id=session.id, boundary=boundary)
    assert selectors.session_log(child) == expected_prefix
    assert child.step_stack == place_all(expected_prefix)[2]  # the scan's step stack after the prefix


def test_a_fork_carries_the_patch_results_it_inherits_clipped_at_its_seed(django_user_model):
    # 0 user, 1 assistant(a, b), then the patch answers a at 2 and b at 3.
    parent = store([("user_message", message("go")), assistant("a", "b")])
    patched = services.patch_dangling_calls(session_id=parent.id, user=django_user_model.objects.create_user("ops"))
    assert [e.seq for e in patched.appended] == [2, 3]
    assert selectors.patch_seqs(parent) == {2, 3}
    inside = services.fork(session_id=parent.id, boundary=2)  # ends between the patch's two results
    whole = services.fork(session_id=parent.id)
    of_fork = services.fork(session_id=inside.id)
    assert (inside.carried_patch_seqs, whole.carried_patch_seqs, of_fork.carried_patch_seqs) == ([2], [2, 3], [2])
    assert selectors.patch_seqs(Session.objects.get(pk=whole.id)) == {2, 3}
