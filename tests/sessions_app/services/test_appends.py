import pytest
from django.db import connection

from sessions_app import services
from sessions_app.lib import errors
from sessions_app.log.events import validate_batch
from sessions_app.log.structure import place_all
from sessions_app.models import REPLACE_BOUND_MAX, CallSighting, Event, Session
from sessions_app.selectors import session_log
from tests.concurrency import run_at_once
from tests.sessions_app import factories as f


@pytest.mark.django_db
def test_append_stores_the_structure_of_each_event():
    services.create_session(session_id="s")
    batch = validate_batch(f.worked_example())
    # In two appends, so the second continues from the stored stacks.
    services.append_events(session_id="s", events=batch[:5])
    services.append_events(session_id="s", events=batch[5:])
    stored = list(Event.objects.order_by("seq").values_list("turn_seq", "step_seq"))
    placements, turn_stack, step_stack = place_all(session_log(Session.objects.get()))
    assert stored == [(p.turn_seq, p.step_seq) for p in placements]
    assert stored[3] == (1, 2) and stored[8] == (1, 7)
    session = Session.objects.get()
    assert (session.turn_stack, session.step_stack) == (turn_stack, step_stack) == ([1], [7])
    assert session.interrupted and session.open_turns == [1]
    assert session.event_count == 10


@pytest.mark.django_db
def test_append_copies_call_ids_for_lookup():
    services.create_session(session_id="s")
    services.append_events(session_id="s", events=validate_batch([f.tool_call("c1"), f.tool_result("c1"), f.event("tool_result", id=7)]))
    assert list(Event.objects.order_by("seq").values_list("call_id", flat=True)) == ["c1", "c1", "7"]


@pytest.mark.django_db(transaction=True)
def test_eight_threads_appending_to_one_session_get_gapless_unique_seqs():
    services.create_session(session_id="busy")

    def writer(worker: int):
        for b in range(10):
            batch = validate_batch([f.user(f"w{worker}-b{b}-{i}") for i in range(3)])
            services.append_events(session_id="busy", events=batch)

    assert run_at_once(writer, [(n,) for n in range(8)]) == [None] * 8
    seqs = list(Event.objects.filter(session_id="busy").order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(8 * 10 * 3))
    assert Session.objects.get(pk="busy").event_count == 240
    # Each batch's three events stayed together: no interleaving inside a batch.
    contents = [e.data["content"] for e in session_log(Session.objects.get(pk="busy"))]
    for start in range(0, 240, 3):
        prefixes = {c.rsplit("-", 1)[0] for c in contents[start : start + 3]}
        assert len(prefixes) == 1


@pytest.mark.django_db(transaction=True)
def test_the_concurrency_test_uses_a_real_database_file_or_server():
    if connection.vendor == "sqlite":
        assert connection.settings_dict["NAME"] != ":memory:" and "mode=memory" not in str(connection.settings_dict["NAME"])
        with connection.cursor() as cursor:
            assert cursor.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    else:
        assert connection.vendor == "postgresql"


@pytest.mark.django_db(transaction=True)
def test_concurrent_retries_with_one_idempotency_key_store_once():
    services.create_session(session_id="retry")

    def retry():
        batch = validate_batch([f.user(), f.user()])
        return services.append_events(session_id="retry", events=batch, idempotency_key="k", request_sha256="same").as_response()

    results = run_at_once(retry, [()] * 6)
    assert results == [{"first_seq": 0, "next_seq": 2}] * 6
    assert Event.objects.filter(session_id="retry").count() == 2


@pytest.mark.django_db(transaction=True)
def test_concurrent_writers_with_expected_seq_one_wins_per_seq():
    services.create_session(session_id="race")

    def writer():
        try:
            services.append_events(session_id="race", events=validate_batch([f.user()]), expected_seq=0)
            return "stored"
        except errors.SeqConflict as exc:
            return exc.next_seq

    outcomes = run_at_once(writer, [()] * 8)
    assert sorted(outcomes, key=str) == [1] * 7 + ["stored"]
    assert Event.objects.filter(session_id="race").count() == 1


@pytest.mark.django_db
def test_append_records_each_assistant_call_id_once_for_lookup():
    from sessions_app.models import CallSighting

    services.create_session(session_id="s")
    calls = {"type": "assistant_message", "data": {"content": "", "tool_calls": [{"id": "a"}, {"id": 5}, {"id": "a"}, {"name": "no id"}]}}
    services.append_events(session_id="s", events=validate_batch([f.user(), calls, f.assistant(calls=["b"])]))
    assert sorted(CallSighting.objects.values_list("seq", "call_id")) == [(1, "5"), (1, "a"), (2, "b")]


@pytest.mark.django_db
@pytest.mark.parametrize("bound", [2**31, 2**63, 10**30])
def test_replace_bounds_past_the_columns_are_kept_in_data_and_clamped_in_the_columns(bound):
    session = services.create_session(session_id="s1")
    summary = f.event("user_message", content="s", surface_op=["replace", bound, bound])
    services.append_events(session_id="s1", events=validate_batch([summary]))
    row = Event.objects.get(session=session)
    assert row.data["surface_op"] == ["replace", bound, bound]
    assert (row.replace_start, row.replace_stop) == (min(bound, REPLACE_BOUND_MAX),) * 2


@pytest.mark.django_db
def test_a_call_id_longer_than_its_column_is_found_by_the_id_itself():
    long_id = "x" * 300
    services.create_session(session_id="s1")
    services.append_events(session_id="s1", events=validate_batch([f.assistant(calls=[long_id]), f.tool_result(long_id)]))
    assert Event.objects.get(call_id=long_id).seq == 1
    assert CallSighting.objects.get(call_id=long_id).seq == 0
    assert Event.objects.filter(call_id__in=[long_id, "other"]).count() == 1


@pytest.mark.django_db
def test_unstorable_text_is_refused_by_every_write_whoever_calls_it(django_user_model):
    from sessions_app.log.values import UnacceptableValue

    with pytest.raises(UnacceptableValue, match=r"^agent_name: contains U\+0000"):
        services.create_session(session_id="s0", agent_name="a\x00")
    with pytest.raises(UnacceptableValue, match=r"^metadata\.k: contains a lone surrogate"):
        services.create_session(session_id="s0", metadata={"k": "\ud800"})
    services.create_session(session_id="s1")
    services.append_events(session_id="s1", events=validate_batch([f.event("turn_start", turn=1)]))
    user = django_user_model.objects.create_user("ops")
    for apply in (services.recover, services.patch_dangling_calls):
        with pytest.raises(UnacceptableValue, match=r"^note: contains U\+0000"):
            apply(session_id="s1", user=user, note="why\x00")
    assert list(Session.objects.values_list("id", "event_count")) == [("s1", 1)]


def agent_hours(agent: str) -> list[tuple]:
    from sessions_app.models import AgentHour

    return list(AgentHour.objects.filter(agent_name=agent).order_by("hour").values_list("hour", "sessions", "turns", "crashed_turns"))


@pytest.mark.django_db
def test_agent_counts_are_kept_at_append_and_recovery_time():
    from datetime import UTC, datetime

    from django.contrib.auth import get_user_model

    services.create_session(session_id="a", agent_name="indexer", created_at=datetime(2026, 3, 1, 9, 30, tzinfo=UTC))
    early = [{"type": "turn_start", "data": {"turn": 1}, "time": "2026-03-01T09:40:00Z"},
             {"type": "turn_end", "data": {"turn": 1, "reason": "complete"}, "time": "2026-03-01T09:41:00Z"},
             {"type": "turn_start", "data": {"turn": 2}, "time": "2026-03-01T10:05:00Z"}]  # fmt: skip
    # A live append's turns count in the hour the server received them.
    services.append_events(session_id="a", events=validate_batch(early[:2]), received_at=datetime(2026, 3, 1, 9, 41, tzinfo=UTC))
    services.append_events(session_id="a", events=validate_batch(early[2:]), received_at=datetime(2026, 3, 1, 10, 5, tzinfo=UTC))
    assert agent_hours("indexer") == [
        (datetime(2026, 3, 1, 9, tzinfo=UTC), 1, 1, 0),
        (datetime(2026, 3, 1, 10, tzinfo=UTC), 0, 1, 0),
    ]
    services.recover(session_id="a", user=get_user_model().objects.create_user("ops"))
    (recovered_hour,) = [row for row in agent_hours("indexer") if row[3]]
    assert recovered_hour[1:] == (0, 0, 1)  # the crash counts in the hour it was recovered


@pytest.mark.django_db(transaction=True)
def test_two_sessions_of_one_agent_count_in_the_same_hour_at_once():
    outcomes = run_at_once(
        lambda sid: services.create_session(session_id=sid, agent_name="busy-agent"), [(f"s{i}",) for i in range(6)]
    )
    assert not [o for o in outcomes if isinstance(o, Exception)]
    ((_, sessions, _, _),) = agent_hours("busy-agent")
    assert sessions == 6


@pytest.mark.django_db
def test_the_repeated_failures_flag_clears_once_the_crash_it_marks_is_closed():
    from django.utils import timezone

    services.create_session(session_id="s")
    services.append_events(session_id="s", events=validate_batch([f.event("turn_start", turn=1), f.event("turn_start", turn=2)]))
    Session.objects.filter(pk="s").update(repeated_failures_at=timezone.now())
    services.append_events(session_id="s", events=validate_batch([f.event("turn_end", reason="complete")]))
    assert Session.objects.get().repeated_failures_at is not None  # turn 1 is still open
    services.append_events(session_id="s", events=validate_batch([f.event("turn_end", reason="complete")]))
    assert Session.objects.get().repeated_failures_at is None
