"""The retention sweep (sessions_app/services/retention/sweep.py) and the worker's rounds: sessions past their project's
retention go, in batches; an unrecovered open turn blocks one, and is listed; forks keep their parent; other
projects keep everything; on SQLite and PostgreSQL."""

import io
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from sessions_app import services, worker
from sessions_app.lib.errors import SessionNotExpired
from sessions_app.log.events import validate_batch
from sessions_app.management.commands import recovery_worker
from sessions_app.models import AuditEntry, Event, LedgerCall, Project, Session
from sessions_app.services import retention
from tests.concurrency import run_at_once
from tests.sessions_app import factories as f

DAYS = 30


def aged(session_id: str, days: float, *, crashed: bool = False, project: Project | None = None, parent: str | None = None) -> None:
    """A session last active and touched `days` ago (by the server's clock, and what retention counts from),
    with an unrecovered open turn if `crashed`."""
    if parent is not None:
        services.fork(session_id=parent, new_session_id=session_id)
    else:
        services.create_session(session_id=session_id, project=project, agent_name="bot")
    items = f.worked_example() if crashed else [f.user(f"words of {session_id}"), f.assistant(calls=["c1"]), f.tool_call("c1"), f.tool_result("c1")]
    services.append_events(session_id=session_id, events=validate_batch(items))
    back_to(session_id, timezone.now() - timedelta(days=days))


def back_to(session_id: str, moment) -> None:
    Session.objects.filter(pk=session_id).update(last_activity_at=moment, retained_from=moment)


@pytest.fixture
def kept_30_days(db):
    project = Project.default()
    project.retention_days = DAYS
    project.save()
    return project


def remaining() -> set[str]:
    return set(Session.objects.values_list("id", flat=True))


@pytest.mark.django_db
def test_old_sessions_go_an_unrecovered_one_stays_and_is_listed_and_other_projects_keep_theirs(kept_30_days, django_user_model):
    forever = Project.objects.create(slug="forever", name="Forever")
    aged("old", 40)
    aged("old-crashed", 40, crashed=True)
    aged("fresh", 29)
    aged("old-elsewhere", 400, project=forever)
    events_of_old = Event.objects.filter(session_id="old").count()

    swept = retention.sweep()

    assert [(d.session_id, d.events) for d in swept.deleted] == [("old", events_of_old)] and remaining() == {"old-crashed", "fresh", "old-elsewhere"}
    assert not Event.objects.filter(session_id="old").exists() and not LedgerCall.objects.filter(session_id="old").exists()
    held = retention.held_sessions()
    assert [(h.session_id, h.held) for h in held] == [("old-crashed", "blocked")] and "unrecovered" in held[0].why
    entry = AuditEntry.objects.get(action=AuditEntry.SESSION_DELETED)
    assert (entry.target, entry.actor_name, entry.actor) == ("old", "retention", None)
    assert entry.detail["policy"] == "retention: 30 days" and entry.detail["events"] == events_of_old
    # Recovered, its turn closed: the next sweep deletes it (recovery is new activity, so it waits its retention).
    services.recover(session_id="old-crashed", user=django_user_model.objects.create_superuser("root"))
    back_to("old-crashed", timezone.now() - timedelta(days=31))
    assert [d.session_id for d in retention.sweep().deleted] == ["old-crashed"] and retention.held_sessions() == []


@pytest.mark.django_db
def test_a_parent_past_retention_stays_while_a_fork_is_kept_and_goes_in_the_same_sweep_after_its_forks(kept_30_days):
    aged("parent", 60)
    aged("young-fork", 1, parent="parent")
    aged("lonely-parent", 60)
    aged("old-fork", 45, parent="lonely-parent")
    back_to("parent", timezone.now() - timedelta(days=60))
    back_to("lonely-parent", timezone.now() - timedelta(days=60))

    swept = retention.sweep()

    assert [d.session_id for d in swept.deleted] == ["old-fork", "lonely-parent"]  # the fork first, then its parent
    assert remaining() == {"parent", "young-fork"}
    assert [(h.session_id, h.held) for h in retention.held_sessions()] == [("parent", "has_forks")]
    assert Event.objects.filter(session_id="young-fork").count() == 8  # its own copy of the prefix, and its events


@pytest.mark.django_db
def test_the_sweep_goes_in_batches_and_stops_at_its_limit(kept_30_days):
    for n in range(7):
        aged(f"s{n}", 40 + n)
    assert len(retention.sweep(batch=2, limit=5).deleted) == 5 and len(remaining()) == 2
    assert len(retention.sweep(batch=2).deleted) == 2 and remaining() == set()


@pytest.mark.django_db
def test_a_session_within_retention_under_the_lock_is_kept_and_the_setting_is_read_there(kept_30_days):
    aged("old", 40)
    with pytest.raises(SessionNotExpired, match="within its project's retention"):  # active since the sweep's read
        retention.delete_session(session_id="old", by_retention=True, now=timezone.now() - timedelta(days=20))
    Project.objects.filter(pk=kept_30_days.pk).update(retention_days=None)  # kept forever since the sweep's read
    with pytest.raises(SessionNotExpired):
        retention.delete_session(session_id="old", by_retention=True)
    Project.objects.filter(pk=kept_30_days.pk).update(retention_days=39)
    assert retention.delete_session(session_id="old", by_retention=True).events == 4
    assert AuditEntry.objects.get(action=AuditEntry.SESSION_DELETED).detail["policy"] == "retention: 39 days"


@pytest.mark.django_db(transaction=True)
def test_two_workers_at_once_delete_each_session_once(kept_30_days):
    ids = [f"s{n}" for n in range(6)]
    for session_id in ids:
        aged(session_id, 40)
    rounds = run_at_once(lambda: worker.run_round(), [(), ()])
    assert not [r for r in rounds if isinstance(r, Exception)], rounds
    deleted = sorted(a.session_id for r in rounds for a in r if a.outcome == worker.DELETED)
    assert deleted == ids and remaining() == set()
    assert AuditEntry.objects.filter(action=AuditEntry.SESSION_DELETED).count() == 6


@pytest.mark.django_db
def test_the_worker_command_says_what_it_deleted_and_each_blocked_session_once(kept_30_days):
    aged("old", 40)
    aged("old-crashed", 40, crashed=True)
    out = io.StringIO()
    call_command("recovery_worker", "--once", stdout=out)
    lines = out.getvalue().splitlines()
    assert any(line.startswith("deleted old ") for line in lines)
    assert any(line.startswith("kept old-crashed ") and "unrecovered" in line for line in lines)
    listed = io.StringIO()
    call_command("sessions", "retention", stdout=listed)
    assert "kept old-crashed" in listed.getvalue() and "unrecovered" in listed.getvalue()
    aged("old-too", 50)
    swept = io.StringIO()
    call_command("sessions", "retention", "--sweep", "--project", "default", stdout=swept)
    assert swept.getvalue().startswith("deleted old-too (4 events)\nkept old-crashed") and remaining() == {"old-crashed"}


@pytest.mark.django_db
def test_the_running_worker_says_a_kept_session_once_and_again_if_it_is_kept_for_another_reason(kept_30_days):
    aged("crashed", 40, crashed=True)
    out = io.StringIO()
    command = recovery_worker.Command(stdout=out)
    assert command.round(verbose=False) and command.round(verbose=False)
    assert [line.split(" (")[0] for line in out.getvalue().splitlines()] == ["kept crashed agent=bot policy=retention"]
    services.fork(session_id="crashed", boundary=0, new_session_id="child")
    back_to("child", timezone.now())
    Session.objects.filter(pk="crashed").update(interrupted=False, turn_stack=[])
    assert command.round(verbose=False)
    assert out.getvalue().splitlines()[-1].startswith("kept crashed") and "it has forks" in out.getvalue().splitlines()[-1]


@pytest.mark.django_db
def test_a_project_without_retention_keeps_everything():
    aged("ancient", 3650)
    assert retention.sweep().deleted == [] and retention.held_sessions() == [] and remaining() == {"ancient"}


# Retention's own clock: the latest of import or creation, last event received, last note written, last recovery.

ONE_DAY = 1


@pytest.fixture
def kept_1_day(db):
    project = Project.default()
    project.retention_days = ONE_DAY
    project.save()
    return project


def written_days_ago(session_id: str, days: float, items=None) -> None:
    """A session created and written `days` ago (its events received then, claiming that time), untouched since."""
    then = timezone.now() - timedelta(days=days)
    stamp = then.isoformat().replace("+00:00", "Z")
    items = items if items is not None else [f.user(f"words of {session_id}"), f.assistant("done")]
    services.create_session(session_id=session_id, agent_name="bot", created_at=then)
    services.append_events(session_id=session_id, events=validate_batch([{**e, "time": stamp} for e in items]), received_at=then)


def a_round_and_a_sweep() -> None:
    """What the worker runs every round, then `manage.py sessions retention --sweep`."""
    worker.run_round()
    call_command("sessions", "retention", "--sweep", stdout=io.StringIO())


def admin_actor(django_user_model):
    from sessions_app.models import Role
    from sessions_app.selectors import access
    from tests.access import member

    user = django_user_model.objects.create_user("ada")
    member(user, Role.ADMIN)
    return access.Actor(user=user)


@pytest.mark.django_db
def test_an_import_of_days_old_events_survives_the_next_rounds_and_the_old_original_goes(kept_1_day, api):
    written_days_ago("original", 2)
    blob = api.get("/api/v1/sessions/original/export").json()
    assert blob["events"][0]["time"] < (timezone.now() - timedelta(days=1)).isoformat()  # the events claim two days ago
    assert api.post("/api/v1/sessions/import?id=copy", blob).status_code == 201

    a_round_and_a_sweep()

    assert remaining() == {"copy"}
    copy = Session.objects.get(pk="copy")
    # Status and the list's order still read the events' claimed last time (never later than the import).
    assert copy.last_activity_at < timezone.now() - timedelta(days=1) and copy.last_received_at is None
    # It counts from the import: a day after it, it goes.
    assert [d.session_id for d in retention.sweep(now=timezone.now() + timedelta(days=ONE_DAY, minutes=1)).deleted] == ["copy"]


@pytest.mark.django_db
def test_a_note_added_to_an_old_session_keeps_it_one_retention_from_the_note(kept_1_day, django_user_model):
    written_days_ago("noted", 2)
    written_days_ago("untouched", 2)
    services.add_note(actor=admin_actor(django_user_model), session_id="noted", text="needs a look", tags=["needs-follow-up"])

    a_round_and_a_sweep()

    assert remaining() == {"noted"}
    assert Session.objects.get(pk="noted").last_activity_at < timezone.now() - timedelta(days=1)  # activity stays the log's
    assert [d.session_id for d in retention.sweep(now=timezone.now() + timedelta(days=ONE_DAY, minutes=1)).deleted] == ["noted"]


@pytest.mark.django_db
def test_a_note_edited_on_an_old_session_keeps_it_and_an_old_note_alone_does_not(kept_1_day, django_user_model):
    from sessions_app.models import Note

    actor = admin_actor(django_user_model)
    then = timezone.now() - timedelta(days=2)
    for session_id in ("edited", "noted-long-ago"):
        written_days_ago(session_id, 2)
        # A note written two days ago, with the session (the services write only now).
        Note.objects.create(session_id=session_id, text="first look", author=actor.user, author_name="ada", created_at=then, updated_at=then)
    services.edit_note(actor=actor, note_id=Note.objects.get(session_id="edited").pk, tags=["needs-follow-up"])

    a_round_and_a_sweep()

    assert remaining() == {"edited"}
    assert Note.objects.get(session_id="edited").tags == ["needs-follow-up"]


@pytest.mark.django_db
def test_a_recovery_of_an_old_crashed_session_keeps_it_one_retention_from_the_recovery(kept_1_day, django_user_model):
    written_days_ago("crashed", 2, items=f.worked_example())
    assert retention.sweep().deleted == [] and [h.session_id for h in retention.held_sessions()] == ["crashed"]  # blocked

    services.recover(session_id="crashed", user=django_user_model.objects.create_superuser("root"))
    a_round_and_a_sweep()

    assert remaining() == {"crashed"} and retention.held_sessions() == []
    assert [d.session_id for d in retention.sweep(now=timezone.now() + timedelta(days=ONE_DAY, minutes=1)).deleted] == ["crashed"]


@pytest.mark.django_db
def test_an_old_untouched_session_is_deleted_and_the_kept_list_shows_when_retention_counts_from(kept_1_day):
    written_days_ago("old", 2)
    written_days_ago("old-crashed", 3, items=f.worked_example())
    written_days_ago("yesterday-ish", 0.5)

    a_round_and_a_sweep()

    assert remaining() == {"old-crashed", "yesterday-ish"}
    [held] = retention.held_sessions()
    assert held.session_id == "old-crashed" and held.retained_from == Session.objects.get(pk="old-crashed").created_at
    listed = io.StringIO()
    call_command("sessions", "retention", stdout=listed)
    assert listed.getvalue().startswith("kept old-crashed (retention counts from ")


@pytest.mark.django_db
def test_a_note_added_while_the_sweep_decides_keeps_the_session(kept_1_day, django_user_model, monkeypatch):
    from sessions_app.selectors import retention as expiry

    written_days_ago("old", 2)
    actor = admin_actor(django_user_model)
    read = expiry.expired_sessions

    def read_then_a_note_is_added(**kwargs):
        found = read(**kwargs)
        if not kwargs["held"] and any(e.session_id == "old" for e in found):
            services.add_note(actor=actor, session_id="old", text="wait, this one matters")
        return found

    monkeypatch.setattr(expiry, "expired_sessions", read_then_a_note_is_added)
    assert retention.sweep().deleted == []
    assert remaining() == {"old"} and Session.objects.get(pk="old").notes.count() == 1


@pytest.mark.django_db(transaction=True)
def test_notes_added_while_two_workers_sweep_are_either_kept_with_their_session_or_refused_as_not_found(kept_1_day, django_user_model):
    from sessions_app.lib.errors import SessionNotFound
    from sessions_app.models import Note

    ids = [f"s{n}" for n in range(6)]
    for session_id in ids:
        written_days_ago(session_id, 2)
    actor = admin_actor(django_user_model)

    def note_on_each():
        refused = []
        for session_id in ids:
            try:
                services.add_note(actor=actor, session_id=session_id, text="still needed")
            except SessionNotFound:
                refused.append(session_id)
        return "refused", refused

    outcomes = run_at_once(lambda job: job(), [(worker.run_round,), (note_on_each,), (worker.run_round,)])
    assert not [o for o in outcomes if isinstance(o, Exception)], outcomes
    [refused] = [o[1] for o in outcomes if isinstance(o, tuple)]
    # Every note that was stored kept its session; a session deleted first refused its note cleanly.
    assert set(Note.objects.values_list("session_id", flat=True)) == remaining() == set(ids) - set(refused)
