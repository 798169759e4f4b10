"""Hostile input to the settling pages (the card's verdict form, "Check now", the Tools page, the project settings,
/calls/ and the search box): no 5xx, nothing stored when refused, and untrusted text (evidence, references,
idempotency keys, receipts, a reconciler's error) rendered escaped everywhere.

Run once on PostgreSQL too (DATABASE_URL=postgres://...): NUL reaching a query is a 500 there only."""

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from sessions_app import services
from sessions_app.log.events import validate_batch
from sessions_app.models import CheckAttempt, LedgerCall, Project, Role, Session, ToolPolicy, Verdict
from sessions_app.selectors import access
from sessions_app.services.verdicts import record_verdict
from tests.access import member

pytestmark = pytest.mark.django_db

X = "<script>alert(1)</script>"
ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"


@pytest.fixture
def admin(client, django_user_model):
    """A page client logged in as an admin of the default project: records verdicts and changes policies."""
    user = django_user_model.objects.create_user("ada", is_staff=True)
    member(user, Role.ADMIN)
    client.force_login(user)
    client.user = user
    return client


def hostile(user) -> None:
    """A stalled session whose key, receipt, verdict and reconciler error all hold markup."""
    ToolPolicy.objects.create(pattern="send_wire", side_effect="external_effect", receipt_pointer="/id", check_url="https://93.184.216.34/c")
    services.create_session(session_id="s1", agent_name="billing-bot")
    calls = [{"id": "w1", "name": "send_wire", "arguments": {"cents": 500}}, {"id": "w2", "name": "send_wire", "arguments": {}}]
    services.append_events(session_id="s1", events=validate_batch([
        {"type": "turn_start", "data": {"turn": 1}},
        {"type": "assistant_message", "data": {"content": "", "tool_calls": calls}},
        {"type": "tool_call", "data": {"id": "w1", "name": "send_wire", "metadata": {"idempotency_key": X + "key"}}},
        {"type": "tool_call", "data": {"id": "w2", "name": "send_wire"}},
        {"type": "tool_result", "data": {"tool_call_id": "w2", "name": "send_wire", "content": json.dumps({"id": X + "receipt"})}},
    ]))  # fmt: skip
    hour_ago = timezone.now() - timedelta(hours=1)
    Session.objects.filter(pk="s1").update(last_activity_at=hour_ago, last_received_at=hour_ago)
    LedgerCall.objects.filter(session_id="s1").update(sighted_at=hour_ago)
    record_verdict(actor=access.Actor(user=user), session_id="s1", call_id="w1", outcome="happened", evidence=X + "evidence", external_ref=X + "ref")
    CheckAttempt.objects.create(session_id="s1", call_id="w1", pattern="send_wire", status=500, error=X + "error")


def page(response) -> str:
    assert response.status_code == 200, response.status_code
    html = response.content.decode()
    assert X not in html
    return html


def test_keys_receipts_verdicts_and_reconciler_errors_render_escaped_on_the_card_the_tools_page_and_search(admin):
    hostile(admin.user)
    card = page(admin.get("/sessions/s1/"))
    for word in ("key", "receipt", "evidence", "ref"):
        assert ESCAPED + word in card, word
    assert ESCAPED + "error" in page(admin.get("/projects/default/tools/"))
    assert ESCAPED + "receipt" in page(admin.get("/", {"q": X + "receipt"}))
    assert ESCAPED + "ref" in page(admin.get("/calls/", {"settled": "true"}))


@pytest.mark.parametrize(
    "query",
    [{"settled": "garbage", "ref": X}, {"settled": ["true", "false"]}, {"ref": "a\x00b"}, {"ref": "x" * 5000}, {"state": X, "class": X}],
    ids=["settled-garbage", "settled-twice", "ref-nul", "ref-huge", "state-class-markup"],
)
def test_the_calls_page_answers_any_filter_escaped(admin, query):
    hostile(admin.user)
    page(admin.get("/calls/", query))


@pytest.mark.parametrize(
    "form, field",
    [
        ({"action": "record"}, "outcome"),
        ({"action": "bogus"}, "action"),
        ({"action": X}, "action"),
        ({"action": "record", "outcome": X, "evidence": X}, "outcome"),
        ({"action": "record", "outcome": "happened", "evidence": "a\x00b"}, "evidence"),
        ({"action": "record", "outcome": "happened", "evidence": "x" * 4001}, "evidence"),
        ({"action": "record", "outcome": "happened", "evidence": "e", "external_ref": "r" * 501}, "external_ref"),
        ({"action": "withdraw", "reason": "x" * 4001}, "reason"),
        ({"action": "withdraw", "reason": "a\x00"}, "reason"),
    ],
)
def test_a_refused_verdict_form_shows_the_card_again_escaped_and_changes_nothing(admin, form, field):
    hostile(admin.user)
    before = list(Verdict.objects.values_list("id", "withdrawn_at"))
    answer = admin.post("/sessions/s1/verdict", {"call_id": "w1", **form}, headers={"HX-Request": "true"})
    html = page(answer)
    assert 'data-call-id="w1"' in html
    assert list(Verdict.objects.values_list("id", "withdrawn_at")) == before
    assert admin.post("/sessions/s1/verdict", {"call_id": "w1", **form}).status_code == 422  # without htmx


@pytest.mark.parametrize("call_id", ["", "w1\x00", X, "L" * 300])
def test_a_verdict_form_for_no_call_of_the_session_is_404(admin, call_id):
    hostile(admin.user)
    answer = admin.post("/sessions/s1/verdict", {"call_id": call_id, "action": "record", "outcome": "happened", "evidence": "e"})
    assert answer.status_code == 404 and X not in answer.content.decode()
    assert admin.post("/sessions/s1/verdict", {"call_id": call_id, "action": "withdraw"}).status_code == 404
    assert Verdict.objects.count() == 1


@pytest.mark.parametrize("call_id", ["nope", "w1%00", "%3Cscript%3E", "L" * 300])
def test_check_now_for_no_call_of_the_session_is_404(admin, call_id):
    hostile(admin.user)
    answer = admin.post(f"/sessions/s1/calls/{call_id}/check")
    assert answer.status_code == 404 and X not in answer.content.decode()


@pytest.mark.parametrize(
    "form, words",
    [
        ({"pattern": "p", "side_effect": "read_only", "check_url": "http://[::1"}, "is not a name or an address"),
        ({"pattern": "p", "side_effect": "read_only", "check_url": "http://u:pw@93.184.216.34/"}, "user name or password"),
        ({"pattern": "p", "side_effect": "read_only", "receipt_pointer": "id"}, "RFC 6901"),
        ({"pattern": "p\x00", "side_effect": "read_only"}, "Null characters are not allowed"),
        ({"pattern": X, "side_effect": "bogus", "note": X}, "Select a valid choice"),
    ],
)
def test_a_refused_policy_form_says_why_escaped_and_stores_nothing(admin, form, words):
    answer = admin.post("/projects/default/tools/", form)
    assert answer.status_code == 422
    html = answer.content.decode()
    assert words in html and X not in html
    assert not ToolPolicy.objects.exists()


@pytest.mark.parametrize("pattern", ["a\x00", X, "", "x" * 5000])
def test_deleting_a_policy_the_project_has_not_says_so(admin, pattern):
    answer = admin.post("/projects/default/tools/", {"action": "delete", "pattern": pattern}, follow=True)
    assert answer.status_code == 200 and X not in answer.content.decode()
    assert "There was no policy for" in answer.content.decode()


@pytest.mark.parametrize("value", ["garbage", "\x00", ["on", "off"], "ON", "true"])
def test_the_settings_checkbox_is_on_only_when_it_says_on(admin, value):
    assert admin.post("/projects/default/settings", {"auto_recover_settled": value}).status_code == 302
    assert Project.objects.get(slug="default").auto_recover_settled is False


@pytest.mark.parametrize("check_url", ["http://[::1", "https://u:pw@93.184.216.34/"])
def test_the_admins_site_wide_policy_form_refuses_a_check_url_that_cannot_be_asked(client, django_user_model, check_url):
    client.force_login(django_user_model.objects.create_superuser("root", password="x"))
    form = {"project": "", "pattern": "charge_*", "side_effect": "external_effect", "note": "", "receipt_pointer": "", "check_url": check_url}
    answer = client.post("/admin/sessions_app/toolpolicy/add/", form)
    assert answer.status_code == 200 and "check_url is refused" in answer.content.decode()
    assert not ToolPolicy.objects.exists()
