import pytest
from django.core.management import call_command


@pytest.mark.django_db
def test_the_models_have_no_change_without_a_migration():
    # Exits with status 1 (SystemExit) when a model change has no migration.
    call_command("makemigrations", "--check", "--dry-run", verbosity=0)


@pytest.mark.django_db(transaction=True)
def test_existing_data_moves_into_a_default_project_with_the_rights_people_had():
    from django.contrib.contenttypes.models import ContentType
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor
    from django.utils import timezone

    from sessions_app.models import Session as SessionModel

    before, after = [("sessions_app", "0003_event_wide_replace_bounds_and_long_call_ids")], [("sessions_app", "0004_projects_tokens_audit")]
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    old = executor.loader.project_state(before).apps
    User, Permission = old.get_model("auth", "User"), old.get_model("auth", "Permission")
    Session, ApiToken = old.get_model("sessions_app", "Session"), old.get_model("sessions_app", "ApiToken")
    root = User.objects.create(username="root", is_superuser=True, is_staff=True)
    ops = User.objects.create(username="ops", is_staff=True)
    granted = User.objects.create(username="granted")
    # The permission as 0001 declared it (today's models no longer create it).
    session_type = ContentType.objects.get_for_model(SessionModel)
    recover, _ = Permission.objects.get_or_create(
        codename="recover_session", content_type_id=session_type.pk, defaults={"name": "Can apply a recovery plan to a session"}
    )
    granted.user_permissions.add(recover.pk)
    agent = User.objects.create(username="agent")
    now = timezone.now()
    for sid in ("s1", "s2"):
        Session.objects.create(id=sid, created_at=now, last_activity_at=now)
    for user, digest in ((agent, "a" * 64), (ops, "b" * 64)):
        ApiToken.objects.create(user=user, token_sha256=digest, prefix="tl_x")

    executor = MigrationExecutor(connection)
    executor.migrate(after)
    new = executor.loader.project_state(after).apps
    Project, Membership = new.get_model("sessions_app", "Project"), new.get_model("sessions_app", "Membership")
    project = Project.objects.get()
    assert project.slug == "default"
    assert set(new.get_model("sessions_app", "Session").objects.values_list("project_id", flat=True)) == {project.pk}
    roles = dict(Membership.objects.filter(project=project).values_list("user__username", "role"))
    assert roles == {"root": "admin", "ops": "operator", "granted": "operator", "agent": "member"}
    tokens = {t.user.username: t for t in new.get_model("sessions_app", "ApiToken").objects.select_related("user")}
    assert tokens["agent"].project_id == project.pk and tokens["agent"].scopes == ["append", "fork", "read"]
    assert tokens["ops"].scopes == ["append", "fork", "read", "recover"]

    MigrationExecutor(connection).migrate(executor.loader.graph.leaf_nodes("sessions_app"))


@pytest.mark.django_db(transaction=True)
def test_forks_made_before_0010_learn_which_inherited_results_a_dangling_call_patch_wrote():
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor
    from django.utils import timezone

    before, after = [("sessions_app", "0009_notes")], [("sessions_app", "0010_session_carried_patch_seqs")]
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    old = executor.loader.project_state(before).apps
    Project, Session = old.get_model("sessions_app", "Project"), old.get_model("sessions_app", "Session")
    Event, RecoveryRecord = old.get_model("sessions_app", "Event"), old.get_model("sessions_app", "RecoveryRecord")
    now = timezone.now()
    project = Project.objects.create(slug="p", name="P")
    calls = {"content": "", "tool_calls": [{"id": "a", "name": "echo"}, {"id": "b", "name": "echo"}]}
    patched = {"content": "Tool call was interrupted and not executed. Please retry if needed.", "metadata": {}}
    log = [("user_message", {"content": "go"}), ("assistant_message", calls),
           ("tool_result", {**patched, "tool_call_id": "a", "name": "echo"}), ("tool_result", {**patched, "tool_call_id": "b", "name": "echo"})]  # fmt: skip

    def session(sid, events, parent=None, seed_length=0):
        made = Session.objects.create(id=sid, project=project, parent=parent, seed_length=seed_length, created_at=now, last_activity_at=now)
        Event.objects.bulk_create(Event(session=made, seq=seq, type=t, time=now, data=d) for seq, (t, d) in enumerate(events))
        return made

    parent = session("parent", log)
    RecoveryRecord.objects.create(session=parent, kind="dangling_patch", username="ops", digest="d" * 64, first_seq=2, last_seq=3)
    whole = session("whole", log, parent, 4)
    inside = session("inside", log[:3], parent, 3)  # ends between the patch's two results
    of_fork = session("of-fork", log[:3], inside, 3)
    # An import that names the parent but holds the tool's own result at seq 2: not the patch's.
    imported = session("imported", [*log[:2], ("tool_result", {"content": "sent", "tool_call_id": "a", "name": "echo", "metadata": {}})], parent, 3)
    untouched = session("untouched", log[:2])

    executor = MigrationExecutor(connection)
    executor.migrate(after)
    new = executor.loader.project_state(after).apps
    carried = dict(new.get_model("sessions_app", "Session").objects.values_list("id", "carried_patch_seqs"))
    assert carried == {"parent": [], "whole": [2, 3], "inside": [2], "of-fork": [2], "imported": [], "untouched": []}
    assert {whole.id, inside.id, of_fork.id, imported.id, untouched.id} <= carried.keys()

    MigrationExecutor(connection).migrate(executor.loader.graph.leaf_nodes("sessions_app"))


@pytest.mark.django_db(transaction=True)
def test_0014_marks_sessions_indexed_except_from_the_first_event_the_backfill_had_not_reached():
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor
    from django.utils import timezone

    before, after = [("sessions_app", "0013_ledger_by_session")], [("sessions_app", "0014_search_after_commit")]
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    old = executor.loader.project_state(before).apps
    Project, Session, Event = (old.get_model("sessions_app", name) for name in ("Project", "Session", "Event"))
    now = timezone.now()
    project = Project.objects.create(slug="p", name="P")

    def session(sid, count, parent=None, seed_length=0):
        made = Session.objects.create(
            id=sid, project=project, parent=parent, seed_length=seed_length, event_count=count, created_at=now, last_activity_at=now
        )
        Event.objects.bulk_create(Event(session=made, seq=seq, type="user_message", time=now, data={"content": "x"}) for seq in range(count))
        return made

    indexed = session("indexed", 3)
    with connection.cursor() as cursor:  # the backfill reached everything so far, then appends indexed their own
        cursor.execute("UPDATE sessions_app_search_backfill SET done = (SELECT MAX(id) FROM sessions_app_event), until = 0")
        last_done = Event.objects.order_by("id").last().pk
    half = session("half", 4)
    fork = session("fork", 3, parent=indexed, seed_length=2)
    with connection.cursor() as cursor:  # the backfill stopped after half's first two events
        cursor.execute("UPDATE sessions_app_search_backfill SET done = %s, until = %s", [last_done + 2, Event.objects.order_by("id").last().pk])
    empty = session("empty", 0)

    executor = MigrationExecutor(connection)
    executor.migrate(after)
    new = executor.loader.project_state(after).apps
    marks = dict(new.get_model("sessions_app", "Session").objects.values_list("id", "search_indexed_seq"))
    assert marks == {"indexed": 3, "half": 2, "fork": 2, "empty": 0}
    assert {half.id, fork.id, empty.id} <= marks.keys()
    with connection.cursor() as cursor:
        assert "sessions_app_search_backfill" not in connection.introspection.table_names(cursor)

    MigrationExecutor(connection).migrate(executor.loader.graph.leaf_nodes("sessions_app"))


@pytest.mark.django_db(transaction=True)
def test_0017_starts_each_sessions_retention_from_its_latest_creation_activity_note_or_recovery():
    from datetime import timedelta

    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor
    from django.utils import timezone

    before, after = [("sessions_app", "0016_notify")], [("sessions_app", "0017_session_retained_from")]
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    old = executor.loader.project_state(before).apps
    Project, Session, Note = (old.get_model("sessions_app", name) for name in ("Project", "Session", "Note"))
    now = timezone.now()
    ago = {days: now - timedelta(days=days) for days in (1, 2, 3, 4, 5, 10)}
    project = Project.objects.create(slug="p", name="P")

    def session(sid, created, active, recovered=None):
        return Session.objects.create(id=sid, project=project, created_at=created, last_activity_at=active, recovered_at=recovered)

    session("written", ago[10], ago[5])
    session("imported", ago[1], ago[10])  # its events claim ten days ago; imported yesterday
    session("recovered", ago[10], ago[10], recovered=ago[4])
    noted = session("noted", ago[10], ago[10])
    Note.objects.create(session=noted, text="a", author_name="ada", created_at=ago[5], updated_at=ago[5])
    Note.objects.create(session=noted, text="b", author_name="ada", created_at=ago[5], updated_at=ago[2])  # edited two days ago
    claims = session("imported-note-claims-the-future", ago[3], ago[10])
    Note.objects.create(session=claims, text="c", author_name="x", created_at=ago[3], updated_at=now + timedelta(days=3650))

    executor = MigrationExecutor(connection)
    executor.migrate(after)
    new = executor.loader.project_state(after).apps
    retained = dict(new.get_model("sessions_app", "Session").objects.values_list("id", "retained_from"))
    future = retained.pop("imported-note-claims-the-future")
    assert retained == {"written": ago[5], "imported": ago[1], "recovered": ago[4], "noted": ago[2]}
    assert now <= future <= timezone.now()  # never later than the migration

    MigrationExecutor(connection).migrate(executor.loader.graph.leaf_nodes("sessions_app"))
