"""`manage.py sessions calls`: a session's calls as its ledger lists them, each verdict worded as the card says it."""

import pytest
from django.core.management import CommandError

from sessions_app.models import Role, ToolPolicy
from sessions_app.selectors import access
from sessions_app.services.verdicts import record_verdict
from tests.access import member
from tests.sessions_app.log.test_recovery import WORKED_EXAMPLE
from tests.sessions_app.management.test_sessions_command import run
from tests.sessions_app.services.test_recovery import store

pytestmark = pytest.mark.django_db


def test_calls_lists_each_call_with_its_state_then_its_verdict(django_user_model):
    ToolPolicy.objects.create(pattern="echo", side_effect="external_effect")
    store(WORKED_EXAMPLE, session_id="crashed")
    vera = django_user_model.objects.create_user("vera")
    member(vera, Role.OPERATOR)
    before = run("calls", "crashed")
    [c3] = [line for line in before.splitlines() if " c3 " in line]
    assert c3.rstrip().endswith("tool_outcome_unknown")
    record_verdict(actor=access.Actor(user=vera), session_id="crashed", call_id="c3", outcome="not_happened", evidence="bank portal, no wire", external_ref="none")
    [c3] = [line for line in run("calls", "crashed").splitlines() if " c3 " in line]
    assert c3.rstrip().endswith("tool_outcome_unknown, verified not happened (vera: bank portal, no wire; ref none)")


def test_calls_without_all_leaves_out_read_only_tools_and_says_so():
    ToolPolicy.objects.create(pattern="echo", side_effect="read_only")
    store(WORKED_EXAMPLE, session_id="crashed")
    assert "--all lists every call" in run("calls", "crashed")
    assert " c3 " in run("calls", "crashed", "--all")


def test_calls_of_an_unknown_session_is_an_error():
    with pytest.raises(CommandError):
        run("calls", "ghost")
