"""Times you can trust: the server's receive time drives status, the stall
window, list order, automatic recovery and the Agents figures; an agent's claimed times are
kept as given, however many years off its clock is."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from sessions_app import selectors, services, worker
from sessions_app.log import blob as log_blob
from sessions_app.log.events import format_time, validate_batch
from sessions_app.models import AgentHour, AutoRecoveryPolicy, Event, Session
from sessions_app.services import event_rows
from tests.sessions_app import factories as f

pytestmark = pytest.mark.django_db

AHEAD = timedelta(days=178)  # an agent whose clock reads next year
BEHIND = -timedelta(days=3 * 365 + 10)  # and one three years late


def append_claiming(session_id: str, items: list[dict], skew: timedelta) -> None:
    """Append live (received now), every event claiming now + `skew`."""
    claimed = format_time(timezone.now() + skew)
    services.append_events(session_id=session_id, events=validate_batch([{**item, "time": claimed} for item in items]))


def later(monkeypatch, seconds: float):
    """The server's clock moved on by `seconds` (status and the list filter read timezone.now)."""
    moved = timezone.now() + timedelta(seconds=seconds)
    monkeypatch.setattr(timezone, "now", lambda: moved)
    return moved


@pytest.mark.parametrize("skew", [AHEAD, BEHIND], ids=["ahead", "behind"])
def test_an_open_turn_runs_then_stalls_by_the_servers_clock_whatever_the_agents(skew, monkeypatch, settings):
    settings.TURNLOG_STALL_SECONDS = 120
    services.create_session(session_id="s", agent_name="skewed")
    append_claiming("s", [f.user(), f.event("turn_start", turn=1)], skew)
    session = Session.objects.get()
    assert session.last_event_at == Event.objects.get(seq=1).time  # the claimed time, as documented
    assert abs((session.last_event_at - timezone.now()) - skew) < timedelta(minutes=1)
    assert session.status == "running" and {*Session.objects.filter(selectors.status_filter("running")).values_list("id", flat=True)} == {"s"}
    later(monkeypatch, 121)
    assert Session.objects.get().status == "stalled"
    assert list(Session.objects.filter(selectors.status_filter("stalled")).values_list("id", flat=True)) == ["s"]


@pytest.mark.parametrize("skew", [AHEAD, BEHIND], ids=["ahead", "behind"])
def test_a_closed_turn_is_active_then_quiet_by_the_servers_clock(skew, monkeypatch, settings):
    settings.TURNLOG_STALL_SECONDS = 120
    services.create_session(session_id="s")
    append_claiming("s", [f.event("turn_start", turn=1), f.event("turn_end", turn=1, reason="complete")], skew)
    assert Session.objects.get().status == "active"
    later(monkeypatch, 121)
    assert Session.objects.get().status == "clean"
    assert list(Session.objects.filter(selectors.status_filter("clean")).values_list("id", flat=True)) == ["s"]


def test_the_list_orders_by_when_the_server_received_the_last_event(api):
    for sid in ("from-the-future", "from-the-past", "on-time"):
        services.create_session(session_id=sid)
    append_claiming("from-the-future", [f.user()], AHEAD)
    append_claiming("on-time", [f.user()], timedelta(0))
    append_claiming("from-the-past", [f.user()], BEHIND)  # received last
    expected = ["from-the-past", "on-time", "from-the-future"]
    assert [s.id for s in selectors.list_sessions().items] == expected
    items = api.get("/api/v1/sessions").json()["items"]
    assert [s["id"] for s in items] == expected
    by_id = {s["id"]: s for s in items}
    future = Session.objects.get(pk="from-the-future")
    assert by_id["from-the-future"]["last_event_at"] == format_time(future.last_event_at)  # claimed, next year
    assert by_id["from-the-future"]["last_activity_at"] == format_time(future.last_activity_at)
    assert future.last_activity_at <= timezone.now() < future.last_event_at


def test_the_worker_recovers_by_how_long_the_server_heard_nothing(settings):
    settings.TURNLOG_STALL_SECONDS = 120
    AutoRecoveryPolicy.objects.create(agent_pattern="*", min_quiet_seconds=900)
    for sid, skew in (("ahead", AHEAD), ("behind", BEHIND)):
        services.create_session(session_id=sid, agent_name="indexer")
        append_claiming(sid, [f.user(), f.event("turn_start", turn=1)], skew)
    # Just received: the agent claiming years ago is not taken for a crash.
    assert worker.run_round() == []
    actions = worker.run_round(now=timezone.now() + timedelta(seconds=901))
    assert {(a.session_id, a.outcome) for a in actions} == {("ahead", worker.RECOVERED), ("behind", worker.RECOVERED)}
    assert all(900 < q < 1000 for q in Session.objects.get(pk="ahead").recoveries.values_list("quiet_seconds", flat=True))


def test_the_agents_figures_count_a_skewed_agents_turns_now_and_its_stall(monkeypatch, settings):
    settings.TURNLOG_STALL_SECONDS = 120
    services.create_session(session_id="s", agent_name="skewed-bot")
    append_claiming("s", [f.event("turn_start", turn=1)], AHEAD)
    project = Session.objects.get().project
    hours = list(AgentHour.objects.filter(agent_name="skewed-bot").values_list("hour", "turns"))
    assert hours == [(event_rows.hour_of(Session.objects.get().last_activity_at), 1)]  # the hour received, not next year's
    now = later(monkeypatch, 121)
    (agent,) = selectors.agent_summaries([project.pk], now)
    assert agent.agent_name == "skewed-bot" and agent.stalled_now == 1 and agent.last_failure.session_id == "s"
    assert agent.day.turns == 1 and agent.last_failure.quiet_seconds == pytest.approx(121, abs=5)
    assert [s.id for s in selectors.agent_stalled_sessions([project.pk], "skewed-bot", now)] == ["s"]


def test_the_agents_page_lists_an_agent_whose_clock_is_years_ahead_once_it_stalls(client, django_user_model, monkeypatch, settings):
    from tests.access import member

    settings.TURNLOG_STALL_SECONDS = 120
    user = django_user_model.objects.create_user("viewer")
    member(user)
    client.force_login(user)
    services.create_session(session_id="s", agent_name="skewed-bot", created_at=timezone.now() - timedelta(days=30))
    append_claiming("s", [f.event("turn_start", turn=1)], AHEAD)
    later(monkeypatch, 121)
    page = client.get("/agents/").content.decode()
    assert "skewed-bot" in page and 'class="agent-row status-stalled"' in page
    detail = client.get("/agents/agent", {"name": "skewed-bot"}).content.decode()
    assert 'href="/sessions/s/"' in detail and "Stalled now" in detail


def test_forks_copy_receive_times_and_imports_have_none():
    services.create_session(session_id="p")
    append_claiming("p", [f.user(), f.event("turn_start", turn=1), f.event("turn_end", turn=1, reason="complete")], AHEAD)
    parent = dict(Event.objects.filter(session_id="p").values_list("seq", "received_at"))
    assert all(parent.values())
    child = services.fork(session_id="p", boundary=2, new_session_id="c")
    assert dict(Event.objects.filter(session_id="c").values_list("seq", "received_at")) == parent
    assert child.last_received_at == parent[2]
    # An import keeps the claimed times and has no receive time; its activity is never in the future.
    blob = log_blob.write_blob(selectors.session_log(Session.objects.get(pk="p")))
    imported, _ = services.import_blob(blob=blob, session_id="i")
    assert list(Event.objects.filter(session_id="i").values_list("received_at", flat=True)) == [None] * 3
    imported.refresh_from_db()
    assert imported.last_received_at is None and imported.last_activity_at <= timezone.now() < imported.last_event_at
    # The fork was received when its parent's events were (just now); an import never was.
    statuses = {s.id: s.status for s in Session.objects.all()}
    assert statuses == {"p": "active", "c": "active", "i": "clean"}
    assert list(Session.objects.filter(selectors.status_filter("clean")).values_list("id", flat=True)) == ["i"]
    # Its turns count in their claimed hour, as before.
    hours = AgentHour.objects.filter(turns__gt=0).values_list("hour", flat=True)
    assert event_rows.hour_of(imported.last_event_at) in hours


def test_an_export_and_import_round_trip_keeps_the_four_fields_exactly(api):
    services.create_session(session_id="p")
    append_claiming("p", [f.user(), f.assistant(calls=["c1"])], AHEAD)
    exported = api.get("/api/v1/sessions/p/export").json()
    assert all(set(e) == {"seq", "type", "time", "data"} for e in exported["events"])
    assert api.post("/api/v1/sessions/import?id=copy", exported).status_code == 201
    assert api.get("/api/v1/sessions/copy/export").json()["events"] == exported["events"]


def test_repairs_are_received_now(django_user_model):
    services.create_session(session_id="s")
    append_claiming("s", [f.user(), f.event("turn_start", turn=1)], AHEAD)
    before = timezone.now()
    result = services.recover(session_id="s", user=django_user_model.objects.create_user("ops"))
    received = Event.objects.filter(session_id="s", seq__gte=result.appended[0].seq).values_list("received_at", flat=True)
    assert all(before <= r <= timezone.now() for r in received)
    assert Session.objects.get().status == "recovered"


@pytest.mark.django_db(transaction=True)
def test_the_migration_brings_activity_times_from_the_future_back_to_now():
    before, after = [("sessions_app", "0005_recovery_strategies_agents")], [("sessions_app", "0006_event_received_at")]
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    old = executor.loader.project_state(before).apps
    Project, OldSession = old.get_model("sessions_app", "Project"), old.get_model("sessions_app", "Session")
    project = Project.objects.create(slug="m", name="M")
    now = timezone.now()
    OldSession.objects.create(id="future", project=project, created_at=now, last_event_at=now + AHEAD, last_activity_at=now + AHEAD)
    OldSession.objects.create(id="past", project=project, created_at=now, last_event_at=now + BEHIND, last_activity_at=now + BEHIND)
    try:
        executor = MigrationExecutor(connection)
        executor.migrate(after)
        NewSession = executor.loader.project_state(after).apps.get_model("sessions_app", "Session")
        migrated = {s.id: s for s in NewSession.objects.all()}
        assert now <= migrated["future"].last_activity_at <= timezone.now()
        assert migrated["future"].last_event_at == now + AHEAD  # the claimed time is kept
        assert migrated["past"].last_activity_at == now + BEHIND
        assert migrated["future"].last_received_at is None
    finally:
        MigrationExecutor(connection).migrate(MigrationExecutor(connection).loader.graph.leaf_nodes("sessions_app"))
