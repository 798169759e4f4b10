import io

import pytest
from django.core.management import CommandError, call_command

from sessions_app import services
from sessions_app.log.events import event_to_wire, validate_batch
from sessions_app.models import AuditEntry, Event, Project, RecoveryRecord, Role, Session, ToolPolicy
from tests.access import member
from tests.sessions_app.log.strategies import events_of
from tests.sessions_app.log.test_recovery import WORKED_EXAMPLE
from tests.sessions_app.services.test_recovery import store

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_user(django_user_model):
    return django_user_model.objects.create_superuser("root", password="x")


def run(*args, stdin: str | None = None, monkeypatch=None) -> str:
    if stdin is not None:
        monkeypatch.setattr("builtins.input", lambda prompt: stdin)
    out = io.StringIO()
    call_command("sessions", *args, stdout=out)
    return out.getvalue()


def test_list_interrupted_shows_only_sessions_with_open_turns():
    store(WORKED_EXAMPLE, session_id="crashed")
    store([("user_message", {"content": "hi"})], session_id="fine")
    listed = run("list", "--interrupted")
    assert "crashed" in listed and "fine" not in listed
    assert "fine" in run("list")


def test_status_names_each_owed_call_with_risk_and_side_effect():
    ToolPolicy.objects.create(pattern="echo", side_effect="external_effect")
    store(WORKED_EXAMPLE, session_id="crashed")
    status = run("status", "crashed")
    assert "stalled" in status and "Open: turn 1 (opened at seq 1)" in status
    c2, c3 = [line for line in status.splitlines() if line.strip().startswith(("c2", "c3"))]
    # Worded as on the recovery page.
    assert "Not started: it did not run" in c2 and "rule 2" in c2 and "external_effect" in c2
    assert "Outcome unknown: it may have run" in c3 and "rule 1" in c3
    assert "Why (rule 2): This turn logged dispatches" in status


@pytest.mark.parametrize("name", [{"tool": "echo"}, ["echo"], 7, None])
def test_status_of_a_call_whose_name_is_not_text_says_its_side_effects_are_unknown(name):
    store([("turn_start", {"turn": 1}), ("assistant_message", {"content": "", "tool_calls": [{"id": "c1", "name": name}]})], session_id="odd")
    (line,) = [line for line in run("status", "odd").splitlines() if line.strip().startswith("c1")]
    assert "side effect: unknown" in line


def test_status_of_an_unknown_session_is_an_error():
    with pytest.raises(CommandError, match="ghost"):
        run("status", "ghost")


def test_recover_yes_appends_and_records(admin_user):
    store(WORKED_EXAMPLE, session_id="crashed")
    output = run("recover", "crashed", "--yes", "--note", "from the CLI")
    assert "appended seqs 10-12" in output
    assert RecoveryRecord.objects.get().note == "from the CLI"
    assert "nothing to recover" in run("recover", "crashed", "--yes")


def test_recover_asks_and_a_refusal_appends_nothing(admin_user, monkeypatch):
    store(WORKED_EXAMPLE, session_id="crashed")
    with pytest.raises(CommandError, match="nothing was appended"):
        run("recover", "crashed", stdin="n", monkeypatch=monkeypatch)
    assert Event.objects.count() == 10 and not RecoveryRecord.objects.exists()
    assert "appended seqs 10-12" in run("recover", "crashed", stdin="y", monkeypatch=monkeypatch)


def test_recover_refused_as_stale_says_which_events_arrived_while_the_person_read(admin_user, monkeypatch):
    store(WORKED_EXAMPLE, session_id="crashed")

    def agent_comes_back_then_yes(prompt):
        services.append_events(session_id="crashed", events=validate_batch([
            {"type": "tool_result", "data": {"tool_call_id": "c3", "content": "back"}},
            {"type": "step_end", "data": {"turn": 1, "step": 2, "outcome": "ok"}},
        ]))  # fmt: skip
        return "y"

    monkeypatch.setattr("builtins.input", agent_comes_back_then_yes)
    with pytest.raises(CommandError) as refused:
        run("recover", "crashed", "--note", "checked")
    assert str(refused.value) == (
        "2 events arrived while you were reading the plan (seqs 10-11): nothing was appended."
        " Run again with the same options to review the fresh plan."
    )
    assert Event.objects.count() == 12 and not RecoveryRecord.objects.exists()


def test_recover_without_any_superuser_is_an_error():
    store(WORKED_EXAMPLE, session_id="crashed")
    with pytest.raises(CommandError, match="--user"):
        run("recover", "crashed", "--yes")
    assert Event.objects.count() == 10


def test_fork_at_a_boundary_and_last():
    store([("user_message", {"content": "a"}), ("user_message", {"content": "b"})], session_id="p")
    assert "Forked p into half: 1 events inherited" in run("fork", "p", "--at", "0", "--id", "half")
    assert "2 events inherited" in run("fork", "p", "--at", "last", "--id", "whole")


def test_fork_refusals_are_errors_in_words():
    store(WORKED_EXAMPLE, session_id="crashed")
    with pytest.raises(CommandError, match=r"seq 5 is inside turn 1, opened at seq 1 .* Allowed boundaries nearby: 0\."):
        run("fork", "crashed", "--at", "5")
    with pytest.raises(CommandError, match="invalid|neither"):
        run("fork", "crashed", "--at", "-3")
    with pytest.raises(CommandError, match="past the end"):
        run("fork", "crashed", "--at", "99")
    with pytest.raises(CommandError, match="already exists"):
        run("fork", "crashed", "--at", "0", "--id", "crashed")


def test_list_shows_each_status_and_labels_open_turns():
    store(WORKED_EXAMPLE, session_id="crashed")
    services.create_session(session_id="chatting")
    services.append_events(session_id="chatting", events=validate_batch([{"type": "user_message", "data": {"content": "hi"}}]))
    listed = run("list")
    crashed = next(line for line in listed.splitlines() if line.startswith("crashed"))
    chatting = next(line for line in listed.splitlines() if line.startswith("chatting"))
    assert "stalled" in crashed and "turn 1 (opened at seq 1)" in crashed
    assert "active" in chatting
    only_active = run("list", "--status", "active")
    assert "chatting" in only_active and "crashed" not in only_active


def test_recover_without_yes_and_without_a_terminal_refuses_naming_yes(admin_user, monkeypatch):
    store(WORKED_EXAMPLE, session_id="crashed")
    monkeypatch.setattr("sys.stdin", io.StringIO(""))  # cron, CI, `< /dev/null`: input() meets end of file
    with pytest.raises(CommandError, match="pass --yes to apply without asking. Nothing was appended"):
        run("recover", "crashed")
    assert Event.objects.count() == 10 and not RecoveryRecord.objects.exists()


def test_recover_reads_a_piped_answer(admin_user, monkeypatch):
    store(WORKED_EXAMPLE, session_id="crashed")
    monkeypatch.setattr("sys.stdin", io.StringIO("yes\n"))
    assert "appended seqs 10-12" in run("recover", "crashed")


def test_a_fork_inside_a_turn_that_closes_later_says_where_it_closes_not_recover():
    store([("user_message", {"content": "hi"}), ("turn_start", {"turn": 1}), ("assistant_message", {"content": "hello"}),
           ("turn_end", {"turn": 1, "steps": 0, "reason": "complete"})], session_id="clean")  # fmt: skip
    with pytest.raises(CommandError) as refused:
        run("fork", "clean", "--at", "2")
    assert str(refused.value) == (
        "seq 2 is inside turn 1, which opened at seq 1 and closes at seq 3; a fork must end outside every turn."
        " Allowed boundaries nearby: 0, 3."
    )


@pytest.mark.parametrize("new_id", ["has space", "x" * 129, ""])
def test_fork_refuses_an_id_outside_the_id_rule(new_id):
    store([("user_message", {"content": "a"})], session_id="p")
    with pytest.raises(CommandError, match="Session ids are 1 to 128 characters"):
        run("fork", "p", "--at", "0", "--id", new_id)
    assert Session.objects.count() == 1


@pytest.mark.parametrize("at", ["²", "1e3", "5_0", " 1"])
def test_fork_at_anything_but_a_seq_or_last_is_an_invalid_boundary_not_a_crash(at):
    store([("user_message", {"content": "a"})], session_id="p")
    with pytest.raises(CommandError, match="is neither a seq"):
        run("fork", "p", "--at", at)


@pytest.fixture
def billing():
    """A second project, beside the default one the other sessions are in."""
    return Project.objects.create(slug="billing", name="Billing")


def in_project(session_id: str, project):
    """The worked example's crashed session, in `project`."""
    services.create_session(session_id=session_id, project=project)
    wire = [{"type": e.type, "data": e.data, "time": event_to_wire(e)["time"]} for e in events_of(WORKED_EXAMPLE)]
    services.append_events(session_id=session_id, events=validate_batch(wire))


def test_list_names_each_sessions_project_and_filters_by_one(billing):
    store(WORKED_EXAMPLE, session_id="ours")
    in_project("theirs", billing)
    listed = run("list")
    assert listed.splitlines()[0].split()[:2] == ["SESSION", "PROJECT"]
    assert next(line for line in listed.splitlines() if line.startswith("ours")).split()[1] == "default"
    assert next(line for line in listed.splitlines() if line.startswith("theirs")).split()[1] == "billing"
    only_billing = run("list", "--project", "billing")
    assert "theirs" in only_billing and "ours" not in only_billing
    assert "ours" in run("list", "--project", "default", "--interrupted")
    billing_clean = run("list", "--project", "billing", "--status", "clean")
    assert billing_clean.strip() == "No clean sessions in project 'billing'."


def test_an_unknown_project_is_an_error_naming_the_known_ones(billing):
    store(WORKED_EXAMPLE, session_id="ours")
    for args in (["list"], ["status", "ours"], ["recover", "ours", "--yes"], ["fork", "ours", "--at", "0"]):
        with pytest.raises(CommandError, match=r"--project 'bilin': no such project \(projects: billing, default\)"):
            run(*args, "--project", "bilin")
    assert Session.objects.count() == 1 and Event.objects.count() == 10


def test_status_recover_and_fork_refuse_a_session_of_another_project(billing, admin_user):
    in_project("theirs", billing)
    for args in (["status", "theirs"], ["recover", "theirs", "--yes"], ["fork", "theirs", "--at", "0", "--id", "copy"]):
        with pytest.raises(CommandError, match="^No session 'theirs' in project 'default'.$"):
            run(*args, "--project", "default")
    assert Event.objects.count() == 10 and not RecoveryRecord.objects.exists() and not Session.objects.filter(id="copy").exists()
    assert "Open: turn 1" in run("status", "theirs", "--project", "billing")
    assert "Forked theirs into copy" in run("fork", "theirs", "--at", "0", "--id", "copy", "--project", "billing")
    assert Session.objects.get(id="copy").project == billing
    assert AuditEntry.objects.get(action=AuditEntry.FORK).actor_name == "cli"
    assert "appended seqs 10-12" in run("recover", "theirs", "--yes", "--project", "billing")


@pytest.mark.parametrize("role, held", [(Role.VIEWER, "a viewer"), (Role.MEMBER, "a member"), (None, "not a member")])
def test_recover_as_a_user_below_operator_is_refused_naming_the_role_needed(billing, django_user_model, role, held):
    in_project("theirs", billing)
    person = django_user_model.objects.create_user("pat")
    if role is not None:
        member(person, role, billing)
    member(person, Role.OPERATOR)  # an operator elsewhere is not an operator here
    with pytest.raises(CommandError, match=f"pat may not recover sessions of project 'billing': that needs the operator role .*; they are {held} there"):
        run("recover", "theirs", "--yes", "--user", "pat")
    assert Event.objects.count() == 10 and not RecoveryRecord.objects.exists()


def test_recover_as_an_operator_of_the_project_records_them(billing, django_user_model):
    in_project("theirs", billing)
    member(django_user_model.objects.create_user("pat"), Role.OPERATOR, billing)
    assert "appended seqs 10-12" in run("recover", "theirs", "--yes", "--user", "pat", "--project", "billing")
    assert RecoveryRecord.objects.get().username == "pat"
    entry = AuditEntry.objects.get(action=AuditEntry.RECOVERY)
    assert (entry.actor_name, entry.project_id, entry.target) == ("pat", billing.pk, "theirs")


CARD_CRASH = [
    ("turn_start", {"turn": 1}),
    ("assistant_message", {"content": "", "tool_calls": [{"id": "e1", "name": "send_email"}, {"id": "p1", "name": "charge_card"}]}),
    ("tool_call", {"id": "e1", "name": "send_email"}),
    ("tool_result", {"content": "sent", "tool_call_id": "e1", "name": "send_email"}),
    ("tool_call", {"id": "p1", "name": "charge_card"}),
]


@pytest.fixture
def effect_policies():
    ToolPolicy.objects.create(pattern="send_email", side_effect="external_effect")
    ToolPolicy.objects.create(pattern="charge_card", side_effect="external_effect")


def test_status_names_the_strategy_and_the_calls_that_decided_it(effect_policies):
    store(CARD_CRASH, session_id="card")
    status = run("status", "card")
    assert "Strategy for turn 1 (opened at seq 0): manual_check: Check by hand before anything is retried" in status
    assert "verify in the outside system: charge_card (call p1, seq 1, external_effect)" in status
    assert "done, never repeat: send_email (call e1, seq 1, result at seq 3)" in status


def test_status_of_a_session_held_for_repeated_failures_says_so():
    store(CARD_CRASH, session_id="card")
    Session.objects.filter(pk="card").update(repeated_failures_at="2026-12-01T10:00:00Z")
    assert "Repeated failures: automatic recovery stopped for this agent" in run("status", "card")


def test_recover_with_context_and_abandon_appends_the_plan_and_the_message_and_records_both(admin_user, effect_policies):
    store(CARD_CRASH, session_id="card")
    output = run("recover", "card", "--yes", "--context", "--abandon")
    assert "appended seqs 5-7" in output
    record = RecoveryRecord.objects.get()
    assert (record.abandoned, record.context_seq, record.strategy_names) == (True, 7, ["manual_check"])
    context = Event.objects.get(session_id="card", seq=7)
    assert context.type == "system_message" and context.data["metadata"] == {"synthetic": True, "recovery_context": True}


def test_recover_without_options_appends_only_the_plan(admin_user, effect_policies):
    store(CARD_CRASH, session_id="card")
    assert "appended seqs 5-6" in run("recover", "card", "--yes")
    assert not Event.objects.filter(session_id="card", type="system_message").exists()


def test_status_says_when_the_agents_clock_is_off_and_goes_by_the_servers():
    from datetime import timedelta

    from django.utils import timezone

    from sessions_app.log.events import format_time

    services.create_session(session_id="skewed")
    claimed = format_time(timezone.now() + timedelta(days=3 * 365 + 30))
    services.append_events(session_id="skewed", events=validate_batch([{"type": "turn_start", "data": {"turn": 1}, "time": claimed}]))
    session = Session.objects.get()
    out = run("status", "skewed")
    assert "1 events, running" in out
    assert f"Last activity {format_time(session.last_activity_at)} (by the server's clock)" in out
    assert f"Agent clock ahead by 3 y: its latest event claims {claimed}, received {format_time(session.last_received_at)}" in out


def test_a_fork_at_a_number_too_long_to_read_is_refused_in_words():
    store(WORKED_EXAMPLE, session_id="crashed")
    with pytest.raises(CommandError, match="--at must be a number of at most 4,300 digits"):
        run("fork", "crashed", "--at", "9" * 4301)
    with pytest.raises(CommandError, match="past the end"):
        run("fork", "crashed", "--at", "9" * 40)


def test_delete_asks_then_deletes_the_whole_session_through_retention_and_audits_it(monkeypatch):
    store(WORKED_EXAMPLE, session_id="crashed")
    store([("user_message", {"content": "hi"})], session_id="other")
    with pytest.raises(CommandError, match="Not confirmed: nothing was deleted"):
        run("delete", "crashed", stdin="n", monkeypatch=monkeypatch)
    assert Session.objects.filter(pk="crashed").exists()
    said = run("delete", "crashed", stdin="y", monkeypatch=monkeypatch)
    assert "Deleted crashed: 10 events" in said
    assert set(Session.objects.values_list("id", flat=True)) == {"other"} and not Event.objects.filter(session_id="crashed").exists()
    entry = AuditEntry.objects.get(action=AuditEntry.SESSION_DELETED)
    assert (entry.target, entry.actor_name, entry.detail["events"]) == ("crashed", "cli", 10)


def test_delete_refuses_a_parent_with_forks_and_an_unknown_session():
    store([("user_message", {"content": "hi"})], session_id="p")
    services.fork(session_id="p", new_session_id="child")
    with pytest.raises(CommandError, match="has forks \\(child\\)"):
        run("delete", "p", "--yes")
    with pytest.raises(CommandError, match="does not exist"):
        run("delete", "nope", "--yes")
    assert Session.objects.count() == 2 and not AuditEntry.objects.filter(action=AuditEntry.SESSION_DELETED).exists()


def test_status_shows_a_verdict_beside_the_owed_calls_risk_and_the_strategy_it_settles(admin_user):
    from sessions_app.services import verdicts as verdict_services
    from sessions_app.selectors import access

    ToolPolicy.objects.create(pattern="echo", side_effect="external_effect")
    store(WORKED_EXAMPLE, session_id="crashed")
    verdict_services.record_verdict(
        actor=access.Actor(user=admin_user), session_id="crashed", call_id="c3", outcome="not_happened", evidence="bank portal, no wire"
    )
    status = run("status", "crashed")
    (c3,) = [line for line in status.splitlines() if line.strip().startswith("c3")]
    assert "tool_outcome_unknown, verified not happened (root: bank portal, no wire)" in c3
    assert "echo (call c3, seq 8): verified not happened by root: it may be retried" in status


def test_recover_refused_as_stale_by_a_verdict_says_so(admin_user, monkeypatch):
    from sessions_app.services import verdicts as verdict_services

    store(WORKED_EXAMPLE, session_id="crashed")

    def verdict_then_yes(prompt):
        verdict_services.record_reconciler_verdict(session_id="crashed", call_id="c3", pattern="echo", outcome="happened", evidence="found")
        return "y"

    monkeypatch.setattr("builtins.input", verdict_then_yes)
    with pytest.raises(CommandError) as refused:
        run("recover", "crashed")
    assert "verdict changed while you were reading the plan: nothing was appended" in str(refused.value)
    assert Event.objects.count() == 10 and not RecoveryRecord.objects.exists()


def test_verdict_records_and_withdraws_as_the_person_named(admin_user):
    from sessions_app.models import Verdict

    store(WORKED_EXAMPLE, session_id="crashed")
    out = run("verdict", "crashed", "c3", "--outcome", "happened", "--evidence", "portal shows it", "--ref", "W-1")
    assert "Call c3: verified happened (root: portal shows it)." in out
    verdict = Verdict.objects.get()
    assert (verdict.by, verdict.user, verdict.external_ref) == ("root", admin_user, "W-1")
    assert "withdrew" in run("verdict", "crashed", "c3", "--withdraw", "--reason", "wrong account").lower()
    assert Verdict.objects.get().withdraw_reason == "wrong account"
    with pytest.raises(CommandError, match="has no current verdict"):
        run("verdict", "crashed", "c3", "--withdraw")
    with pytest.raises(CommandError, match="no tool call with id 'c9'"):
        run("verdict", "crashed", "c9", "--outcome", "happened", "--evidence", "x")
    with pytest.raises(CommandError, match="evidence: evidence is empty"):
        run("verdict", "crashed", "c3", "--outcome", "happened", "--evidence", "  ")
    with pytest.raises(CommandError, match="Pass --outcome and --evidence"):
        run("verdict", "crashed", "c3")
    assert Event.objects.count() == 10
