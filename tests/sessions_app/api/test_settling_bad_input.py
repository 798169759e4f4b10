"""Hostile input to the settling endpoints (verdicts, the fleet's `ref` and `settled`, tool policies, imported
verdicts): each is a clear 4xx naming what was wrong and where, and stores nothing; none is a 5xx.

Run once on PostgreSQL too (DATABASE_URL=postgres://...): NUL reaching a query is a 500 there only."""

import json
from urllib.parse import quote

import pytest

from sessions_app.models import AuditEntry, CallCheck, LedgerCall, Role, ToolPolicy, Verdict
from tests.access import member, token_for
from tests.sessions_app import factories as f
from tests.sessions_app.api.http import append, assert_error, make_session
from tests.sessions_app.api.test_tools import logged_in
from tests.sessions_app.api.test_verdicts import Client, crashed, path

pytestmark = pytest.mark.django_db

GOOD = {"outcome": "happened", "evidence": "bank portal shows the wire"}
POLICY = "/api/v1/projects/default/tools/policies/"


@pytest.fixture
def ops(django_user_model):
    """An operator of the default project: may recover, so may record verdicts."""
    return Client(token_for(django_user_model.objects.create_user("vera", is_staff=True), role=Role.OPERATOR))


@pytest.fixture
def admin(django_user_model):
    user = django_user_model.objects.create_user("boss")
    member(user, Role.ADMIN)
    return logged_in(user)


def nothing_settled():
    assert not Verdict.objects.exists()
    assert not LedgerCall.objects.exclude(verdict=None).exists()
    assert not AuditEntry.objects.filter(action__in=[AuditEntry.VERDICT_RECORDED, AuditEntry.VERDICT_WITHDRAWN]).exists()


# --- PUT .../verdict ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw, status, error",
    [
        (b"not json", 400, "invalid_json"),
        (b"[]", 422, "invalid_request"),
        (b'"happened"', 422, "invalid_request"),
        (b"null", 422, "invalid_request"),
        (b"7", 422, "invalid_request"),
        (b"", 422, "invalid_request"),
        (b'{"outcome": "happened", "evidence": "a\\u0000b"}', 422, "invalid_text"),
        (b'{"outcome": "happened", "evidence": "\\ud800"}', 422, "invalid_text"),
        (b'{"outcome": "happened", "evidence": "x", "external_ref": "\\udfff"}', 422, "invalid_text"),
        (b'{"outcome": "happened\\u0000", "evidence": "x"}', 422, "invalid_text"),
        (b'{"outcome": "happened", "evidence": NaN}', 400, "invalid_json"),
    ],
)
def test_a_verdict_body_that_is_no_verdict_object_is_refused_and_stores_nothing(ops, raw, status, error):
    crashed(ops)
    assert_error(ops.put(path("c1"), raw), status, error)
    nothing_settled()


@pytest.mark.parametrize("field", ["outcome", "evidence", "external_ref"])
@pytest.mark.parametrize("value", [7, 1.5, True, {}, ["happened"]], ids=["int", "float", "bool", "object", "list"])
def test_a_verdict_field_of_the_wrong_json_type_is_invalid_request_naming_it(ops, field, value):
    crashed(ops)
    answer = assert_error(ops.put(path("c1"), {**GOOD, field: value}), 422, "invalid_request")
    assert [e["loc"] for e in answer["errors"]] == [[field]] and answer["detail"].startswith(f"{field}: ")
    nothing_settled()


@pytest.mark.parametrize(
    "body, field, reason",
    [
        ({**GOOD, "evidence": ""}, "evidence", "empty"),
        ({**GOOD, "evidence": " \n\t "}, "evidence", "empty"),
        ({**GOOD, "evidence": "x" * 4001}, "evidence", "too_long"),
        ({**GOOD, "evidence": "x" * (10 * 1024 * 1024)}, "evidence", "too_long"),
        ({**GOOD, "external_ref": "r" * 501}, "external_ref", "too_long"),
    ],
)
def test_a_verdict_breaking_a_limit_is_invalid_verdict_with_its_field_and_reason(ops, body, field, reason):
    crashed(ops)
    answer = assert_error(ops.put(path("c1"), body), 422, "invalid_verdict")
    assert (answer["field"], answer["reason"]) == (field, reason)
    nothing_settled()


def test_a_verdict_at_the_limits_and_in_any_script_is_kept_as_sent(ops):
    crashed(ops)
    body = {"outcome": "not_happened", "evidence": "é😀" + "x" * 3998, "external_ref": "ref-ü" + "r" * 495}
    call = ops.put(path("c1"), body).json()
    assert (call["verdict"]["evidence"], call["verdict"]["external_ref"]) == (body["evidence"], body["external_ref"])


def test_a_missing_outcome_or_an_unknown_word_is_invalid_request_naming_outcome(ops):
    crashed(ops)
    for body in ({"evidence": "x"}, {**GOOD, "outcome": "maybe"}, {**GOOD, "outcome": None}, {**GOOD, "outcome": "HAPPENED"}):
        answer = assert_error(ops.put(path("c1"), body), 422, "invalid_request")
        assert answer["errors"][0]["loc"] == ["outcome"]
    nothing_settled()


def test_a_verdict_on_an_unknown_session_or_call_is_404_and_without_the_recover_scope_403(ops, django_user_model):
    crashed(ops)
    assert_error(ops.put(path("c1", session_id="nope"), GOOD), 404, "not_found")
    assert_error(ops.put(path("c2"), GOOD), 404, "not_found")
    read_only = Client(token_for(django_user_model.objects.get(username="vera"), role=Role.OPERATOR, scopes=["read"]))
    assert_error(read_only.put(path("c1"), GOOD), 403, "forbidden")
    assert_error(read_only.client.delete(path("c1"), headers=read_only.headers), 403, "forbidden")
    assert_error(read_only.post(path("c1", "check")), 403, "forbidden")
    assert read_only.get(path("c1", "verdicts")).status_code == 200
    nothing_settled()


@pytest.mark.parametrize("call_id", ["a/verdict", "x%y", "q?r", "h#i", "..", ".", "é😀", "L" * 300], ids=repr)
def test_a_call_id_of_any_text_is_one_segment_for_every_verdict_endpoint(ops, call_id):
    crashed(ops, call_ids=(call_id,))
    assert ops.put(path(call_id), GOOD).json()["call_id"] == call_id
    (verdict,) = ops.get(path(call_id, "verdicts")).json()["verdicts"]
    assert verdict["outcome"] == "happened"
    assert_error(ops.post(path(call_id, "check")), 409, "no_reconciler")
    assert ops.client.delete(path(call_id), headers=ops.headers).json()["verdict"] is None
    if len(call_id) > 255:  # stored as its digest, looked up by the id itself
        assert Verdict.objects.get().call_id.startswith("sha256:")


@pytest.mark.parametrize("raw", ["/api/v1/sessions/s1/calls/c1%00/verdict", "/api/v1/sessions/s1/calls//verdict"])
def test_a_call_id_that_cannot_be_is_404(ops, raw):
    crashed(ops)
    assert_error(ops.put(raw, GOOD), 404, "not_found")
    nothing_settled()


# --- DELETE .../verdict ------------------------------------------------------------------------------------------


def delete(client, call_id, raw=None):
    if raw is None:
        return client.client.delete(path(call_id), headers=client.headers)
    return client.client.delete(path(call_id), raw, content_type="application/json", headers=client.headers)


@pytest.mark.parametrize(
    "raw, status, error",
    [
        (b"not json", 400, "invalid_json"),
        (b"[]", 422, "invalid_request"),
        (b"null", 422, "invalid_request"),
        (b'{"reason": 5}', 422, "invalid_request"),
        (b'{"reason": "\\ud800"}', 422, "invalid_text"),
        (b'{"reason": "a\\u0000"}', 422, "invalid_text"),
    ],
)
def test_a_withdrawal_body_that_is_no_object_of_text_is_refused_and_the_verdict_stays(ops, raw, status, error):
    crashed(ops)
    ops.put(path("c1"), GOOD)
    assert_error(delete(ops, "c1", raw), status, error)
    assert Verdict.objects.get().withdrawn_at is None and LedgerCall.objects.get(call_id="c1").verdict == "happened"


def test_a_withdrawal_reason_over_the_limit_is_invalid_verdict_and_the_verdict_stays(ops):
    crashed(ops)
    ops.put(path("c1"), GOOD)
    answer = assert_error(delete(ops, "c1", json.dumps({"reason": "x" * 4001}).encode()), 422, "invalid_verdict")
    assert (answer["field"], answer["reason"]) == ("reason", "too_long")
    assert Verdict.objects.get().withdrawn_at is None


def test_a_withdrawal_takes_no_body_an_empty_one_or_a_null_reason(ops):
    crashed(ops)
    for raw in (None, b"", b"{}", b'{"reason": null}', b'{"reason": "wrong call", "extra": 1}'):
        ops.put(path("c1"), GOOD)
        assert delete(ops, "c1", raw).json()["verdict"] is None
    assert_error(delete(ops, "c1"), 404, "not_found")  # nothing current to withdraw


# --- a fork's inherited call ---------------------------------------------------------------------------------------


def forked(ops):
    make_session(ops, "parent")
    append(ops, "parent", [f.user(), f.assistant(calls=["c1"]), f.tool_call("c1"), f.user("more")])
    assert ops.post("/api/v1/sessions/parent/fork", {"boundary": 3, "id": "child"}).status_code == 201


def test_a_refused_check_or_withdrawal_on_a_forks_inherited_call_stores_nothing(ops):
    forked(ops)
    assert_error(ops.post(path("c1", "check", session_id="child")), 409, "no_reconciler")
    assert_error(ops.client.delete(path("c1", session_id="child"), headers=ops.headers), 404, "not_found")
    assert_error(ops.put(path("c1", session_id="child"), {**GOOD, "evidence": ""}), 422, "invalid_verdict")
    # The fork has no row of its own yet: the fleet still lists the call under the parent alone.
    assert list(LedgerCall.objects.values_list("session_id", flat=True)) == ["parent"]
    assert not CallCheck.objects.exists()
    assert [c["session_id"] for c in ops.get("/api/v1/calls", {"state": "pending", "settled": "any"}).json()["items"]] == ["parent"]


# --- GET /api/v1/calls: ref and settled --------------------------------------------------------------------------


@pytest.mark.parametrize("ref", ["", "x" * 10_000, "é😀", "ch_3Px' OR 1=1 --", "%"], ids=["empty", "huge", "unicode", "quote", "percent"])
def test_any_ref_text_is_looked_up_exactly(ops, ref):
    crashed(ops)
    assert ops.get("/api/v1/calls", {"ref": ref}).json() == {"items": [], "next_cursor": None}


@pytest.mark.parametrize(
    "query, error, where",
    [
        ("ref=a%00b", "invalid_text", "ref"),
        ("settled=maybe", "invalid_request", "settled"),
        ("settled=", "invalid_request", "settled"),
        ("settled=TRUE", "invalid_request", "settled"),
        ("settled=%00", "invalid_text", "settled"),
        ("ref=x&state=bogus", "invalid_request", "state"),
        ("ref=x&class=bogus", "invalid_request", "class"),
        ("ref=x&settled=any&cursor=garbage", "invalid_cursor", "cursor"),
        ("ref=x&cursor=%00", "invalid_text", "cursor"),
    ],
)
def test_a_bad_fleet_filter_beside_ref_is_a_422_naming_it(ops, query, error, where):
    crashed(ops)
    answer = assert_error(ops.get(f"/api/v1/calls?{query}"), 422, error)
    assert where in answer["detail"]


# --- tool policies -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "check_url, words",
    [
        ("http://[::1", "is not a name or an address"),
        ("http://[zz]/x", "is not a name or an address"),
        ("https://[2001:db8::1/check", "is not a name or an address"),
        ("http://a..b/check", "a..b is not a host name"),
        ("http://" + "a" * 70 + ".example/check", "is not a host name"),
        ("http://93.184.216.34:0/check", "port"),
        ("http://93.184.216.34:99999/check", "port"),
        ("http://user:secret@93.184.216.34/check", "user name or password"),
        ("https://token@93.184.216.34/check", "user name or password"),
        ("http://[::1]/check", "loopback"),
        ("http://[::ffff:127.0.0.1]/check", "loopback"),
        ("javascript:alert(1)", "http:// or https://"),
        ("file:///etc/passwd", "http:// or https://"),
    ],
)
def test_a_check_url_that_cannot_be_asked_is_invalid_policy_and_stores_nothing(admin, check_url, words):
    response = admin.client.put(POLICY + "charge_card", {"side_effect": "external_effect", "check_url": check_url}, content_type="application/json")
    answer = assert_error(response, 422, "invalid_policy")
    assert (answer["field"], answer["reason"]) == ("check_url", "address_refused") and words in answer["detail"]
    assert not ToolPolicy.objects.exists()


def test_a_check_url_with_an_at_sign_past_its_host_is_no_user_name(admin):
    url = "https://93.184.216.34/check?who=a@b#c@d"
    response = admin.client.put(POLICY + "charge_card", {"side_effect": "external_effect", "check_url": url}, content_type="application/json")
    assert response.status_code == 200, response.content
    assert response.json()["check_url"] == url


@pytest.mark.parametrize(
    "body, field, reason",
    [
        ({"side_effect": "unknown"}, "side_effect", "invalid_class"),
        ({"side_effect": "read_only", "receipt_pointer": "id"}, "receipt_pointer", "invalid_pointer"),
        ({"side_effect": "read_only", "receipt_pointer": "/a~2"}, "receipt_pointer", "invalid_pointer"),
        ({"side_effect": "read_only", "receipt_pointer": "/~"}, "receipt_pointer", "invalid_pointer"),
        ({"side_effect": "read_only", "receipt_pointer": "/" + "a" * 600}, "receipt_pointer", "too_long"),
        ({"side_effect": "read_only", "note": "n" * 301}, "note", "too_long"),
        ({"side_effect": "read_only", "check_url": "https://93.184.216.34/" + "a" * 2000}, "check_url", "too_long"),
    ],
)
def test_a_policy_breaking_a_limit_is_invalid_policy_naming_it(admin, body, field, reason):
    answer = assert_error(admin.client.put(POLICY + "charge_card", body, content_type="application/json"), 422, "invalid_policy")
    assert (answer["field"], answer["reason"]) == (field, reason)
    assert not ToolPolicy.objects.exists()


def test_a_policy_field_of_the_wrong_type_or_a_body_that_is_no_object_is_refused(admin):
    for raw in (b"", b"[]", b"null"):
        assert_error(admin.client.put(POLICY + "p", raw, content_type="application/json"), 422, "invalid_request")
    assert_error(admin.client.put(POLICY + "p", b"nope", content_type="application/json"), 400, "invalid_json")
    for body in ({}, {"side_effect": None}, {"side_effect": 1}, {"side_effect": "read_only", "note": 5}):
        assert_error(admin.client.put(POLICY + "p", body, content_type="application/json"), 422, "invalid_request")
    nul = admin.client.put(POLICY + "p", {"side_effect": "read_only", "note": "a\u0000"}, content_type="application/json")
    assert_error(nul, 422, "invalid_text")
    assert not ToolPolicy.objects.exists()


@pytest.mark.parametrize("sent, pattern", [("a%2Fb", "a/b"), ("a/b", "a/b"), ("%2A", "*"), ("a%3Fb", "a?b"), ("a%23b", "a#b"), ("%FF", "%FF")])
def test_a_pattern_is_the_rest_of_the_path_percent_decoded(admin, sent, pattern):
    answer = admin.client.put(POLICY + sent, {"side_effect": "read_only"}, content_type="application/json")
    assert answer.json()["pattern"] == pattern
    assert admin.client.delete(POLICY + sent).status_code == 204
    assert not ToolPolicy.objects.exists()


@pytest.mark.parametrize("sent, status, error", [("a%00b", 422, "invalid_policy"), ("x" * 201, 422, "invalid_policy"), ("", 404, "not_found")])
def test_a_pattern_that_cannot_be_is_refused_by_put_and_not_found_by_delete(admin, sent, status, error):
    assert_error(admin.client.put(POLICY + sent, {"side_effect": "read_only"}, content_type="application/json"), status, error)
    assert_error(admin.client.delete(POLICY + sent), 404, "not_found")
    assert not ToolPolicy.objects.exists()


def test_a_project_slug_holding_nul_is_no_project(admin):
    assert_error(admin.client.get("/api/v1/projects/%00/tools"), 404, "not_found")
    assert_error(admin.client.put("/api/v1/projects/a%00/tools/policies/p", {"side_effect": "read_only"}, content_type="application/json"), 404)
    assert_error(admin.client.delete("/api/v1/projects/a%00/tools/policies/p"), 404, "not_found")


def test_a_token_never_changes_policies(ops):
    body = {"side_effect": "read_only"}
    assert_error(ops.client.put(POLICY + "p", body, content_type="application/json", headers=ops.headers), 403, "forbidden")
    assert_error(ops.client.delete(POLICY + "p", headers=ops.headers), 403, "forbidden")


# --- imported verdicts ----------------------------------------------------------------------------------------------


@pytest.fixture
def blob(ops):
    make_session(ops, "src")
    append(ops, "src", [f.user(), f.assistant(calls=["c1"]), f.tool_call("c1"), f.user("more")])
    ops.put(path("c1", session_id="src"), GOOD)
    return ops.get("/api/v1/sessions/src/export").json()


def imported(ops, blob, verdicts, session_id="imp"):
    response = ops.post(f"/api/v1/sessions/import?id={quote(session_id)}", {**blob, "verdicts": verdicts})
    assert response.status_code == 201, response.content
    return response.json()["warnings"], list(Verdict.objects.filter(session_id=session_id).order_by("at", "id"))


@pytest.mark.parametrize(
    "entry, warning",
    [
        (7, "verdicts[0] dropped: not an object"),
        (None, "verdicts[0] dropped: not an object"),
        ({"call_id": None}, "verdicts[0] dropped: call_id null is not a call id"),
        ({"call_id": 5}, "verdicts[0] dropped: call_id 5 is not a call id"),
        ({"outcome": "maybe"}, 'verdicts[0] dropped: outcome must be "happened" or "not_happened"'),
        ({"evidence": "x" * 4001}, "verdicts[0] dropped: evidence has 4001 characters"),
        ({"evidence": 7}, "verdicts[0] dropped: evidence must be a string"),
        ({"external_ref": "r" * 501}, "verdicts[0] dropped: external_ref has 501 characters"),
        ({"call_id": "nope"}, "verdicts[0] dropped: call 'nope' is not a call of this session"),
        ({"call_id": "L" * 300}, "verdicts[0] dropped: call 'LLLL"),
    ],
)
def test_an_imported_verdict_that_cannot_be_kept_is_dropped_with_a_warning_naming_it(ops, blob, entry, warning):
    good = blob["verdicts"][0]
    warnings, stored = imported(ops, blob, [{**good, **entry} if isinstance(entry, dict) else entry])
    assert any(w.startswith(warning) for w in warnings), warnings
    assert stored == [] and LedgerCall.objects.get(session_id="imp").verdict is None


def test_an_imported_withdrawal_whose_time_is_unreadable_stays_withdrawn(ops, blob):
    withdrawn = {**blob["verdicts"][0], "withdrawn_at": "yesterday", "withdrawn_by": "vera"}
    warnings, (stored,) = imported(ops, blob, [withdrawn])
    assert any("withdrawn_at \"yesterday\" is not a time" in w for w in warnings), warnings
    assert stored.withdrawn_at == stored.at
    assert LedgerCall.objects.get(session_id="imp").verdict is None  # not settled by a verdict someone withdrew


def test_an_imported_withdrawal_before_its_verdict_is_withdrawn_when_made(ops, blob):
    early = {**blob["verdicts"][0], "at": "2026-03-01T12:00:00Z", "withdrawn_at": "2000-01-01T00:00:00Z", "withdrawn_by": "vera"}
    warnings, (stored,) = imported(ops, blob, [early])
    assert "verdicts[0]: withdrawn_at is before its at; kept as withdrawn at its at" in warnings
    assert stored.withdrawn_at == stored.at


def test_an_imported_verdict_from_the_future_is_kept_at_the_imports_time(ops, blob):
    future = {**blob["verdicts"][0], "at": "9999-12-31T23:59:59Z"}
    withdrawn = {**future, "outcome": "not_happened", "withdrawn_at": "9999-12-31T23:59:59Z", "withdrawn_by": "vera"}
    warnings, stored = imported(ops, blob, [future, withdrawn])
    assert "verdicts[0]: at 9999-12-31T23:59:59Z is after the import's time; kept at the import's time" in warnings
    assert "verdicts[1]: withdrawn_at is after the import's time; kept as withdrawn at the import's time" in warnings
    assert all(v.at.year < 9999 and (v.withdrawn_at is None or v.withdrawn_at.year < 9999) for v in stored)
    # Recorded here later, a verdict replaces the imported one, withdrawn no earlier than it was made.
    assert ops.put(path("c1", session_id="imp"), {**GOOD, "outcome": "not_happened"}).status_code == 200
    replaced = Verdict.objects.get(session_id="imp", outcome="happened")
    assert replaced.withdrawn_at >= replaced.at


@pytest.mark.parametrize("at", ["garbage", 5, "2026-03-01T12:00:00", []], ids=repr)
def test_an_imported_verdict_whose_time_is_unreadable_is_kept_at_the_imports_time_with_a_warning(ops, blob, at):
    warnings, (stored,) = imported(ops, blob, [{**blob["verdicts"][0], "at": at}])
    assert any(w.startswith("verdicts[0]: at ") and "kept at the import's time" in w for w in warnings), warnings
    assert LedgerCall.objects.get(session_id="imp").verdict == "happened"


def test_an_imported_verdicts_unknown_source_and_overlong_reason_are_said(ops, blob):
    good = blob["verdicts"][0]
    entry = {**good, "source": "alien", "withdrawn_at": good["at"], "withdrawn_by": "vera", "withdraw_reason": "w" * 4001}
    warnings, (stored,) = imported(ops, blob, [entry])
    assert 'verdicts[0]: source "alien" is not person or reconciler; kept as person' in warnings
    assert any(w.startswith("verdicts[0]: reason has 4001 characters") for w in warnings), warnings
    assert (stored.source, stored.withdraw_reason) == ("person", "")


def test_two_current_imported_verdicts_of_one_call_leave_the_later_current(ops, blob):
    good = blob["verdicts"][0]
    later = {**good, "outcome": "not_happened", "at": "2026-03-02T12:00:00Z", "by": "ann"}
    earlier = {**good, "at": "2026-03-01T12:00:00Z"}
    warnings, (first, second) = imported(ops, blob, [later, earlier])
    assert (first.outcome, first.withdrawn_by, second.outcome, second.withdrawn_at) == ("happened", "ann", "not_happened", None)
    assert LedgerCall.objects.get(session_id="imp").verdict == "not_happened"


@pytest.mark.parametrize("verdicts", ["x", {"a": 1}, 7])
def test_imported_verdicts_that_are_no_list_are_dropped_with_a_warning(ops, blob, verdicts):
    warnings, stored = imported(ops, blob, verdicts)
    assert any(w.startswith("verdicts ") and "is not a list" in w for w in warnings) and stored == []
