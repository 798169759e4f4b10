import io

import pytest
from django.core.management import CommandError, call_command

from sessions_app import services
from sessions_app.models import AuditEntry, Membership, Project, Role
from sessions_app.selectors import access
from tests.access import member, token_for
from tests.conftest import ApiClient

pytestmark = pytest.mark.django_db


def run(*args) -> str:
    out = io.StringIO()
    call_command("projects", *args, stdout=out)
    return out.getvalue()


@pytest.fixture
def alice(django_user_model):
    return django_user_model.objects.create_user("alice")


def test_create_then_list_counts_members_and_sessions(alice):
    assert "Created project 'billing' (Billing Team)" in run("create", "billing", "--name", "Billing Team")
    run("create", "ops")
    member(alice, Role.VIEWER, Project.objects.get(slug="billing"))
    services.create_session(session_id="s1", project=Project.objects.get(slug="billing"))
    rows = {line.split()[0]: line.split() for line in run("list").splitlines()[1:]}
    assert rows["billing"] == ["billing", "1", "1", "Billing", "Team"]
    assert rows["ops"] == ["ops", "0", "0", "ops"]  # the name defaults to the slug


@pytest.mark.parametrize("slug, problem", [("has space", "slug: Enter a valid “slug”"), ("billing", "slug: Project with this Slug already exists")])
def test_create_refuses_a_bad_or_taken_slug(slug, problem):
    Project.objects.create(slug="billing", name="Billing")
    with pytest.raises(CommandError, match=f"Cannot create project '{slug}': {problem}"):
        run("create", slug)
    assert set(Project.objects.values_list("slug", flat=True)) == {"default", "billing"}


def test_add_member_change_role_and_remove_are_audited_as_cli(alice):
    run("create", "billing")
    billing = Project.objects.get(slug="billing")
    assert run("add-member", "billing", "alice", "--role", "member").strip() == "Added alice to billing as member."
    assert run("add-member", "billing", "alice", "--role", "member").strip() == "alice already is member of billing: nothing changed."
    assert "Changed alice's role in billing from member to operator" in run("add-member", "billing", "alice", "--role", "operator")
    assert access.Actor(user=alice).can(billing.pk, access.RECOVER)
    listed = run("members", "billing").splitlines()
    assert listed[0].split() == ["USER", "ROLE", "SINCE"] and listed[1].split()[:2] == ["alice", "operator"]
    assert "Removed alice from billing" in run("remove-member", "billing", "alice")
    assert not Membership.objects.filter(project=billing).exists()
    trail = list(AuditEntry.objects.filter(project=billing).order_by("id").values_list("action", "target", "actor_name", "actor"))
    assert trail == [
        (AuditEntry.MEMBER_ADDED, "alice", "cli", None),
        (AuditEntry.MEMBER_CHANGED, "alice", "cli", None),
        (AuditEntry.MEMBER_REMOVED, "alice", "cli", None),
    ]


def test_a_removed_members_token_no_longer_reaches_the_projects_sessions(alice):
    services.create_session(session_id="s1")
    api = ApiClient(token_for(alice))
    assert api.get("/api/v1/sessions/s1").status_code == 200
    assert "their tokens for it no longer reach its sessions" in run("remove-member", "default", "alice")
    assert api.get("/api/v1/sessions/s1").status_code == 404


def test_members_of_an_empty_project():
    run("create", "billing")
    assert run("members", "billing").strip() == "Project 'billing' has no members."


@pytest.mark.parametrize(
    "args",
    [["members", "nope"], ["add-member", "nope", "alice", "--role", "member"], ["remove-member", "nope", "alice"]],
)
def test_an_unknown_project_is_an_error_naming_the_known_ones(alice, args):
    run("create", "billing")
    with pytest.raises(CommandError, match=r"No project 'nope' \(projects: billing, default\)"):
        run(*args)


def test_an_unknown_user_or_a_non_member_is_an_error(alice):
    run("create", "billing")
    with pytest.raises(CommandError, match="No user 'bob'"):
        run("add-member", "billing", "bob", "--role", "member")
    with pytest.raises(CommandError, match="alice is not a member of project 'billing': nothing to remove"):
        run("remove-member", "billing", "alice")
    assert not AuditEntry.objects.exists()


def test_an_unknown_role_is_refused_by_the_parser(alice):
    run("create", "billing")
    with pytest.raises(CommandError, match="invalid choice: 'owner'"):
        run("add-member", "billing", "alice", "--role", "owner")


def test_the_last_admin_cannot_be_removed_or_lowered(alice, django_user_model):
    run("create", "billing")
    run("add-member", "billing", "alice", "--role", "admin")
    for args in (["remove-member", "billing", "alice"], ["add-member", "billing", "alice", "--role", "operator"]):
        with pytest.raises(CommandError, match="alice is the only admin of billing.*Nothing changed"):
            run(*args)
    assert Membership.objects.get().role == Role.ADMIN
    django_user_model.objects.create_user("bob")
    run("add-member", "billing", "bob", "--role", "admin")
    assert "Removed alice" in run("remove-member", "billing", "alice")
