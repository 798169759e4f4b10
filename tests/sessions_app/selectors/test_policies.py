"""project_policies: a project's own policies and the site's it does not redefine, read by a statement compiled once."""

from __future__ import annotations

import pytest

from sessions_app.log import policies as log_policies
from sessions_app.models import Project, ToolPolicy
from sessions_app.selectors.policies import project_policies

pytestmark = pytest.mark.django_db


def _seen(policies: list[log_policies.Policy]) -> list[tuple]:
    return sorted((p.pattern, p.side_effect, p.scope, p.receipt_pointer, p.note) for p in policies)


def test_a_project_reads_its_own_and_the_sites_it_does_not_redefine():
    one = Project.objects.create(slug="one", name="One")
    two = Project.objects.create(slug="two", name="Two")
    ToolPolicy.objects.create(pattern="charge_*", side_effect="irreversible", receipt_pointer="/id", note="site")
    ToolPolicy.objects.create(pattern="search_*", side_effect="read_only")
    ToolPolicy.objects.create(project=one, pattern="charge_*", side_effect="idempotent", note="one's own")
    ToolPolicy.objects.create(project=two, pattern="send_*", side_effect="irreversible")

    # The same compiled statement, bound to each project in turn (and again: nothing of the first call is kept).
    for _ in range(2):
        assert _seen(project_policies(one.pk)) == [
            ("charge_*", "idempotent", log_policies.PROJECT, "", "one's own"),
            ("search_*", "read_only", log_policies.SITE, "", ""),
        ]
        assert _seen(project_policies(two.pk)) == [
            ("charge_*", "irreversible", log_policies.SITE, "/id", "site"),
            ("search_*", "read_only", log_policies.SITE, "", ""),
            ("send_*", "irreversible", log_policies.PROJECT, "", ""),
        ]
    assert _seen(project_policies(None)) == [
        ("charge_*", "irreversible", log_policies.SITE, "/id", "site"),
        ("search_*", "read_only", log_policies.SITE, "", ""),
    ]


def test_a_policy_changed_is_read_at_once():
    project = Project.objects.create(slug="p", name="P")
    assert project_policies(project.pk) == []
    policy = ToolPolicy.objects.create(project=project, pattern="refund", side_effect="irreversible")
    assert [p.id for p in project_policies(project.pk)] == [policy.pk]
    policy.delete()
    assert project_policies(project.pk) == []
