"""tools.py over HTTP: GET /api/v1/projects/{slug}/tools and a project's policies (PUT, DELETE .../tools/policies/{pattern})."""

import pytest
from django.test import Client

from sessions_app.models import AuditEntry, Project, ReceiptSweep, Role, ToolPolicy
from tests.access import member, token_for
from tests.conftest import ApiClient
from tests.sessions_app.api.http import append, assert_error, make_session
from tests.sessions_app.api.test_calls import CRASH, calls, ev, quiet
from tests.sessions_app.log.strategies import message

pytestmark = pytest.mark.django_db

TOOLS = "/api/v1/projects/default/tools"
PUBLIC_URL = "https://93.184.216.34/check"  # a public address given as an IP: nothing to resolve


def logged_in(user) -> ApiClient:
    """The API with a login session (the browser's): tokens never carry the admin capability."""
    client = ApiClient(None)
    client.client.force_login(user)
    return client


def put(client: ApiClient, pattern: str, body: dict, slug: str = "default"):
    return client.client.put(f"/api/v1/projects/{slug}/tools/policies/{pattern}", body, content_type="application/json", headers=client.headers)


@pytest.fixture
def admin(django_user_model) -> ApiClient:
    user = django_user_model.objects.create_user("boss")
    member(user, Role.ADMIN)
    return logged_in(user)


@pytest.fixture
def crashed(api):
    """A stalled session of the default project owing charge_card (outcome unknown) after a lookup."""
    make_session(api, "crash")
    assert append(api, "crash", CRASH).status_code == 201
    quiet("crash")
    return "crash"


def test_tools_lists_every_tool_used_with_its_calls_unknown_outcomes_and_class(api, crashed):
    ToolPolicy.objects.create(pattern="lookup", side_effect="read_only", note="reads")
    body = api.get(TOOLS).json()
    assert body["tools"] == [
        {"name": "charge_card", "calls": 1, "unknown_calls": 1, "class": "unknown"},
        {"name": "lookup", "calls": 1, "unknown_calls": 0, "class": "read_only"},
    ]
    assert body["policies"] == [
        {"pattern": "lookup", "side_effect": "read_only", "note": "reads", "receipt_pointer": "", "check_url": "", "scope": "site"}
    ]


def test_a_project_policy_wins_over_the_site_one_then_exact_then_longest(admin, api, crashed):
    ToolPolicy.objects.create(pattern="charge_card", side_effect="read_only")
    ToolPolicy.objects.create(pattern="*", side_effect="idempotent")
    assert [c["class"] for c in calls(api, "crash", "?all=true")] == ["idempotent", "read_only"]
    # The project's own policy for the same pattern wins over the site's.
    assert put(admin, "charge_card", {"side_effect": "external_effect"}).status_code == 200
    assert [c["class"] for c in calls(api, "crash", "?all=true")] == ["idempotent", "external_effect"]
    # The longer pattern wins among wildcards, and an exact name over any of them.
    assert put(admin, "look*", {"side_effect": "external_effect"}).status_code == 200
    assert put(admin, "l*", {"side_effect": "read_only"}).status_code == 200
    assert [c["class"] for c in calls(api, "crash", "?all=true")] == ["external_effect", "external_effect"]
    assert put(admin, "lookup", {"side_effect": "idempotent"}).status_code == 200
    assert [c["class"] for c in calls(api, "crash", "?all=true")] == ["idempotent", "external_effect"]
    body = api.get(TOOLS).json()
    assert [(t["name"], t["class"]) for t in body["tools"]] == [("charge_card", "external_effect"), ("lookup", "idempotent")]
    assert [(p["pattern"], p["scope"]) for p in body["policies"]] == [
        ("*", "site"), ("charge_card", "project"), ("l*", "project"), ("look*", "project"), ("lookup", "project")
    ]


def test_another_projects_policy_does_not_apply(api, admin, crashed):
    other = Project.objects.create(slug="other", name="Other")
    ToolPolicy.objects.create(project=other, pattern="charge_card", side_effect="read_only")
    assert [c["class"] for c in calls(api, "crash", "?all=true")] == ["unknown", "unknown"]
    assert api.get(TOOLS).json()["policies"] == []


def test_an_admin_sets_a_reconciler_and_is_given_its_secret_once(admin):
    body = {"side_effect": "external_effect", "note": "moves money", "receipt_pointer": "/id", "check_url": PUBLIC_URL}
    response = put(admin, "charge_*", body)
    assert response.status_code == 200, response.content
    saved = response.json()
    assert saved["check_secret"].startswith("whsec_")
    assert {k: v for k, v in saved.items() if k != "check_secret"} == {**body, "pattern": "charge_*", "scope": "project"}
    policy = ToolPolicy.objects.get(pattern="charge_*")
    assert policy.check_secret == saved["check_secret"] and policy.project == Project.default()
    # Saved again unchanged, or with only the note changed: no secret in the answer, the same one kept.
    assert "check_secret" not in put(admin, "charge_*", body).json()
    assert "check_secret" not in put(admin, "charge_*", {"side_effect": "external_effect", "note": "money"}).json()
    assert ToolPolicy.objects.get(pattern="charge_*").check_secret == saved["check_secret"]
    # A new address: a new secret.
    moved = put(admin, "charge_*", {"side_effect": "external_effect", "check_url": PUBLIC_URL + "2"}).json()
    assert moved["check_secret"] not in ("", saved["check_secret"])
    # The listing never shows a secret.
    assert "check_secret" not in admin.get(TOOLS).json()["policies"][0]


def test_absent_fields_stay_as_they_are_and_empty_ones_clear_them(admin):
    put(admin, "charge_*", {"side_effect": "external_effect", "note": "n", "receipt_pointer": "/id", "check_url": PUBLIC_URL})
    kept = put(admin, "charge_*", {"side_effect": "idempotent"}).json()
    assert (kept["note"], kept["receipt_pointer"], kept["check_url"]) == ("n", "/id", PUBLIC_URL)
    cleared = put(admin, "charge_*", {"side_effect": "idempotent", "check_url": "", "receipt_pointer": ""}).json()
    assert (cleared["receipt_pointer"], cleared["check_url"]) == ("", "")
    assert ToolPolicy.objects.get(pattern="charge_*").check_secret == ""


def test_each_change_is_audited_and_a_receipt_pointer_change_sweeps_stored_calls(admin):
    put(admin, "charge_*", {"side_effect": "external_effect"})
    put(admin, "charge_*", {"side_effect": "external_effect", "receipt_pointer": "/charge/id", "check_url": PUBLIC_URL})
    put(admin, "charge_*", {"side_effect": "external_effect"})  # nothing changed: not audited
    assert admin.client.delete("/api/v1/projects/default/tools/policies/charge_*").status_code == 204
    entries = AuditEntry.objects.filter(action=AuditEntry.TOOL_POLICY_CHANGED).order_by("id")
    assert [(e.target, e.actor_name) for e in entries] == [("charge_*", "boss")] * 3
    assert [e.detail for e in entries] == [
        {"scope": "project", "created": True, "side_effect": "external_effect"},
        {"scope": "project", "changed": ["receipt_pointer", "check_url", "check_secret"], "side_effect": "external_effect"},
        {"scope": "project", "deleted": True, "side_effect": "external_effect"},
    ]
    # The pointer's change and the deletion of a policy with one: the stored calls' receipts are re-read.
    assert list(ReceiptSweep.objects.values_list("project__slug", "pattern")) == [("default", "charge_*")] * 2
    assert not ToolPolicy.objects.exists()


def test_a_pattern_holding_a_slash_or_a_star_stays_one_path_segment(admin):
    assert put(admin, "stripe%2Fcharges%2A", {"side_effect": "external_effect"}).json()["pattern"] == "stripe/charges*"
    assert put(admin, "%2A", {"side_effect": "read_only"}).json()["pattern"] == "*"
    assert put(admin, "a%25b%3Fc%23d", {"side_effect": "read_only"}).json()["pattern"] == "a%b?c#d"
    assert sorted(ToolPolicy.objects.values_list("pattern", flat=True)) == ["*", "a%b?c#d", "stripe/charges*"]
    assert admin.client.delete("/api/v1/projects/default/tools/policies/stripe%2Fcharges*").status_code == 204
    assert admin.client.delete("/api/v1/projects/default/tools/policies/*").status_code == 204


@pytest.mark.parametrize(
    ("body", "field", "reason"),
    [
        ({"side_effect": "unknown"}, "side_effect", "invalid_class"),
        ({"side_effect": "writes"}, "side_effect", "invalid_class"),
        ({"side_effect": "read_only", "receipt_pointer": "id"}, "receipt_pointer", "invalid_pointer"),
        ({"side_effect": "read_only", "receipt_pointer": "/a~2b"}, "receipt_pointer", "invalid_pointer"),
        ({"side_effect": "read_only", "receipt_pointer": "/a~"}, "receipt_pointer", "invalid_pointer"),
        ({"side_effect": "read_only", "check_url": "http://127.0.0.1:9/check"}, "check_url", "address_refused"),
        ({"side_effect": "read_only", "check_url": "http://10.0.0.8/check"}, "check_url", "address_refused"),
        ({"side_effect": "read_only", "check_url": "ftp://93.184.216.34/check"}, "check_url", "address_refused"),
        ({"side_effect": "read_only", "note": "x" * 301}, "note", "too_long"),
    ],
)
def test_bad_input_is_refused_naming_the_field_and_stores_nothing(admin, body, field, reason):
    refused = assert_error(put(admin, "charge_*", body), 422, "invalid_policy")
    assert (refused["field"], refused["reason"]) == (field, reason)
    assert not ToolPolicy.objects.exists() and not AuditEntry.objects.filter(action=AuditEntry.TOOL_POLICY_CHANGED).exists()


def test_valid_pointers_with_escapes_are_kept(admin):
    assert put(admin, "t", {"side_effect": "read_only", "receipt_pointer": "/a~0b/c~1d/0/"}).json()["receipt_pointer"] == "/a~0b/c~1d/0/"


def test_an_over_long_pattern_is_refused(admin):
    refused = assert_error(put(admin, "x" * 201, {"side_effect": "read_only"}), 422, "invalid_policy")
    assert refused["field"] == "pattern"


def test_a_private_reconciler_address_is_allowed_with_the_webhooks_setting(admin, settings):
    settings.TURNLOG_WEBHOOK_ALLOW_PRIVATE = True
    response = put(admin, "charge_*", {"side_effect": "external_effect", "check_url": "http://127.0.0.1:9/check"})
    assert response.status_code == 200 and response.json()["check_secret"].startswith("whsec_")


def test_only_the_projects_admins_change_policies(django_user_model, api, admin):
    viewer, operator = (django_user_model.objects.create_user(name) for name in ("viewer", "operator"))
    member(viewer, Role.VIEWER)
    member(operator, Role.OPERATOR)
    for client in (logged_in(viewer), logged_in(operator), api):
        assert_error(put(client, "charge_*", {"side_effect": "read_only"}), 403, "forbidden")
        assert client.get(TOOLS).status_code == 200
    # An admin's token neither: tokens carry no admin scope, so scripts cannot change what ranks every check.
    admins_token = ApiClient(token_for(django_user_model.objects.get(username="boss"), Role.ADMIN))
    assert_error(put(admins_token, "charge_*", {"side_effect": "read_only"}), 403, "forbidden")
    put(admin, "charge_*", {"side_effect": "external_effect"})
    assert_error(api.client.delete("/api/v1/projects/default/tools/policies/charge_*", headers=api.headers), 403, "forbidden")
    assert ToolPolicy.objects.get().side_effect == "external_effect"


def test_unknown_projects_and_policies_are_404(django_user_model, admin):
    assert_error(admin.get("/api/v1/projects/nowhere/tools"), 404, "not_found")
    assert_error(put(admin, "x", {"side_effect": "read_only"}, slug="nowhere"), 404, "not_found")
    assert_error(admin.client.delete("/api/v1/projects/default/tools/policies/nothing"), 404, "not_found")
    # A site-wide policy is not the project's to delete.
    ToolPolicy.objects.create(pattern="site_*", side_effect="read_only")
    assert_error(admin.client.delete("/api/v1/projects/default/tools/policies/site_*"), 404, "not_found")
    # A project the user is no member of does not exist for them.
    Project.objects.create(slug="secret", name="Secret")
    assert_error(admin.get("/api/v1/projects/secret/tools"), 404, "not_found")
    assert_error(put(admin, "x", {"side_effect": "read_only"}, slug="secret"), 404, "not_found")


def test_a_missing_or_mistyped_class_is_a_request_error(admin):
    assert_error(put(admin, "x", {}), 422, "invalid_request")
    assert_error(put(admin, "x", {"side_effect": 3}), 422, "invalid_request")


def test_calls_naming_no_tool_are_left_out(api):
    make_session(api, "s")
    append(api, "s", [ev("assistant_message", message("", tool_calls=[{"id": "c1", "arguments": {}}]))])
    assert api.get(TOOLS).json()["tools"] == []


def test_anonymous_is_401(client: Client):
    assert client.get(TOOLS).status_code == 401
