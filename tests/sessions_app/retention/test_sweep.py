"""The retention sweep (sessions_app/retention/sweep.py) and the worker's rounds: sessions past their project's
retention go, in batches; an unrecovered open turn blocks one, and is listed; forks keep their parent; other
projects keep everything; on SQLite and PostgreSQL."""

import io
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from sessions_app import retention, services, worker
from sessions_app.management.commands import recovery_worker
from sessions_app.log.events import validate_batch
from sessions_app.errors import SessionNotExpired
from sessions_app.models import AuditEntry, Event, LedgerCall, Project, Session
from tests.concurrency import run_at_once
from tests.sessions_app import factories as f

DAYS = 30


def aged(session_id: str, days: float, *, crashed: bool = False, project: Project | None = None, parent: str | None = None) -> None:
    """A session last active `days` ago (by the server's clock), with an unrecovered open turn if `crashed`."""
    if parent is not None:
        services.fork(session_id=parent, new_session_id=session_id)
    else:
        services.create_session(session_id=session_id, project=project, agent_name="bot")
    items = f.worked_example() if crashed else [f.user(f"words of {session_id}"), f.assistant(calls=["c1"]), f.tool_call("c1"), f.tool_result("c1")]
    services.append_events(session_id=session_id, events=validate_batch(items))
    Session.objects.filter(pk=session_id).update(last_activity_at=timezone.now() - timedelta(days=days))


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
    Session.objects.filter(pk="old-crashed").update(last_activity_at=timezone.now() - timedelta(days=31))
    assert [d.session_id for d in retention.sweep().deleted] == ["old-crashed"] and retention.held_sessions() == []


@pytest.mark.django_db
def test_a_parent_past_retention_stays_while_a_fork_is_kept_and_goes_in_the_same_sweep_after_its_forks(kept_30_days):
    aged("parent", 60)
    aged("young-fork", 1, parent="parent")
    aged("lonely-parent", 60)
    aged("old-fork", 45, parent="lonely-parent")
    Session.objects.filter(pk="parent").update(last_activity_at=timezone.now() - timedelta(days=60))
    Session.objects.filter(pk="lonely-parent").update(last_activity_at=timezone.now() - timedelta(days=60))

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
    Session.objects.filter(pk="child").update(last_activity_at=timezone.now())
    Session.objects.filter(pk="crashed").update(interrupted=False, turn_stack=[])
    assert command.round(verbose=False)
    assert out.getvalue().splitlines()[-1].startswith("kept crashed") and "it has forks" in out.getvalue().splitlines()[-1]


@pytest.mark.django_db
def test_a_project_without_retention_keeps_everything():
    aged("ancient", 3650)
    assert retention.sweep().deleted == [] and retention.held_sessions() == [] and remaining() == {"ancient"}
