"""services.tool_policies and services.project_settings: who changes which policies, what a change keeps, clears and
records, and a project's switch for recovering settled crashes."""

import pytest

from sessions_app.lib.errors import InvalidPolicy
from sessions_app.models import AuditEntry, Project, ReceiptSweep, Role, ToolPolicy
from sessions_app.selectors import access
from sessions_app.services import project_settings, tool_policies
from tests.access import member

pytestmark = pytest.mark.django_db

PUBLIC_URL = "https://93.184.216.34/check"


@pytest.fixture
def admin(django_user_model) -> access.Actor:
    user = django_user_model.objects.create_user("alice")
    member(user, Role.ADMIN)
    return access.Actor(user=user)


@pytest.fixture
def root(django_user_model) -> access.Actor:
    return access.Actor(user=django_user_model.objects.create_superuser("root"))


def test_only_superusers_change_site_wide_policies(admin, root):
    with pytest.raises(access.Forbidden):
        tool_policies.save_policy(actor=admin, project_slug=tool_policies.SITE, pattern="send_*", side_effect="external_effect")
    policy, _ = tool_policies.save_policy(actor=root, project_slug=tool_policies.SITE, pattern="send_*", side_effect="external_effect")
    assert policy.project is None and policy.scope == "site"
    with pytest.raises(access.Forbidden):
        tool_policies.delete_policy(actor=admin, project_slug=tool_policies.SITE, pattern="send_*")
    tool_policies.delete_policy(actor=root, project_slug=tool_policies.SITE, pattern="send_*")
    assert [e.project for e in AuditEntry.objects.filter(action=AuditEntry.TOOL_POLICY_CHANGED)] == [None, None]


def test_a_site_wide_pointer_change_sweeps_every_project(root):
    tool_policies.save_policy(actor=root, project_slug=tool_policies.SITE, pattern="charge_*", side_effect="external_effect", receipt_pointer="/id")
    assert list(ReceiptSweep.objects.values_list("project", "pattern")) == [(None, "charge_*")]


def test_the_same_pattern_in_the_site_and_a_project_are_two_policies(admin, root):
    tool_policies.save_policy(actor=root, project_slug=tool_policies.SITE, pattern="charge_*", side_effect="read_only")
    tool_policies.save_policy(actor=admin, project_slug="default", pattern="charge_*", side_effect="external_effect")
    assert sorted(ToolPolicy.objects.values_list("project__slug", "side_effect"), key=str) == [("default", "external_effect"), (None, "read_only")]


def test_clearing_the_reconciler_drops_its_secret_and_none_keeps_a_field(admin):
    _, secret = tool_policies.save_policy(actor=admin, project_slug="default", pattern="t", side_effect="idempotent", check_url=PUBLIC_URL)
    assert secret and ToolPolicy.objects.get().check_secret == secret
    kept, again = tool_policies.save_policy(actor=admin, project_slug="default", pattern="t", side_effect="read_only", check_url=None)
    assert again is None and (kept.check_url, kept.check_secret) == (PUBLIC_URL, secret)
    cleared, none = tool_policies.save_policy(actor=admin, project_slug="default", pattern="t", side_effect="read_only", check_url="")
    assert none is None and (cleared.check_url, cleared.check_secret) == ("", "")
    changed = [e.detail.get("changed") for e in AuditEntry.objects.filter(action=AuditEntry.TOOL_POLICY_CHANGED).order_by("id")]
    assert changed == [None, ["side_effect"], ["check_url"]]


def test_checks_name_the_field(admin):
    with pytest.raises(InvalidPolicy) as nul:
        tool_policies.save_policy(actor=admin, project_slug="default", pattern="a\x00b", side_effect="read_only")
    with pytest.raises(InvalidPolicy) as empty:
        tool_policies.save_policy(actor=admin, project_slug="default", pattern="", side_effect="read_only")
    assert (nul.value.field, nul.value.reason, empty.value.reason) == ("pattern", "invalid_text", "empty")
    assert tool_policies.checked_pointer("") == "" and tool_policies.checked_pointer("/") == "/"


def test_the_auto_recover_switch_is_audited_only_when_it_changes(admin):
    project = Project.default()
    project_settings.set_auto_recover_settled(project=project, enabled=False, actor=admin.user)
    assert not AuditEntry.objects.filter(action=AuditEntry.PROJECT_SETTINGS_CHANGED).exists()
    project_settings.set_auto_recover_settled(project=project, enabled=True, actor=admin.user)
    assert Project.default().auto_recover_settled
    entry = AuditEntry.objects.get(action=AuditEntry.PROJECT_SETTINGS_CHANGED)
    assert (entry.target, entry.actor_name, entry.detail) == ("default", "alice", {"field": "auto_recover_settled", "before": False, "after": True})
    with pytest.raises(TypeError):
        project_settings.set_auto_recover_settled(project=project, enabled="yes", actor=admin.user)
