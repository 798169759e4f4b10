"""Asking a reconciler (sessions_app.services.reconcilers.asking) over real HTTP: the request signed and verified by the
endpoint with `standardwebhooks`, the answer's contract, every attempt recorded, backoff and the attempts' limit
(the clock driven by `now`), the webhooks' address rules and no redirects."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from sessions_app.models import CallCheck, CheckAttempt, Event, Verdict
from sessions_app.services import reconcilers
from sessions_app.services.reconcilers import BACKOFF, MAX_ATTEMPTS
from tests.sessions_app.services.notify.crashes import crashed, stalled_clock

from tests.reconciler_endpoint import Answer, check_policy


def checked_crash(endpoint, path="/check", *answers, session_id="crash-1"):
    """A stalled crash whose call c3 has a pending check at the endpoint's `path`; the moment it reads stalled."""
    check_policy(endpoint.answer(path, *answers), endpoint.secret)
    session = crashed(session_id)
    now = stalled_clock(session)
    assert reconcilers.schedule_checks(now=now) == [(session_id, "c3")]
    return session, now


def attempts():
    return list(CheckAttempt.objects.order_by("at", "id").values_list("status", "outcome", "error"))


@pytest.mark.django_db
def test_a_happened_answer_records_the_reconcilers_verdict_and_settles_the_check(endpoint):
    session, now = checked_crash(endpoint, "/check", Answer(body={"outcome": "happened", "evidence": "found by key", "external_ref": "ch_1"}))
    [asked] = reconcilers.ask_due(now=now)
    assert (asked.outcome, asked.attempt, asked.status, asked.answer) == ("settled", 1, 200, "happened")
    assert endpoint.bad_signatures == 0
    [body] = endpoint.received
    dispatched = Event.objects.get(session=session, seq=9).time  # c3's tool_call event
    assert {k: v for k, v in body.items() if k != "_path"} == {
        "type": "call.check", "session_id": "crash-1", "project": "default", "agent_name": "bot", "call_id": "c3",
        "name": "tool_c3", "arguments": {"x": 1}, "idempotency_key": None,
        "dispatched_at": dispatched.isoformat().replace("+00:00", "Z"),
    }  # fmt: skip
    verdict = Verdict.objects.get()
    assert (verdict.call_id, verdict.outcome, verdict.evidence, verdict.external_ref, verdict.source, verdict.by) == (
        "c3", "happened", "found by key", "ch_1", "reconciler", "reconciler:tool_c3",
    )
    assert CallCheck.objects.get().state == CallCheck.SETTLED
    assert attempts() == [(200, "happened", "")]
    assert reconcilers.ask_due(now=now + timedelta(days=2)) == []  # settled: never asked again


@pytest.mark.django_db
def test_unknown_is_asked_again_after_the_backoff(endpoint):
    unknown = Answer(body={"outcome": "unknown", "evidence": "still processing"})
    _, now = checked_crash(endpoint, "/check", unknown, Answer(body={"outcome": "not_happened", "evidence": "no charge"}))
    [first] = reconcilers.ask_due(now=now)
    assert (first.outcome, first.answer) == ("retry", "unknown")
    assert reconcilers.ask_due(now=now + BACKOFF[0] - timedelta(seconds=1)) == []  # not due yet
    [second] = reconcilers.ask_due(now=now + BACKOFF[0])
    assert (second.outcome, second.attempt, second.answer) == ("settled", 2, "not_happened")
    assert attempts() == [(200, "unknown", "the reconciler does not know yet: still processing"), (200, "not_happened", "")]
    assert Verdict.objects.get().outcome == "not_happened"


@pytest.mark.django_db
def test_eight_failed_attempts_within_a_day_then_it_gives_up(endpoint):
    _, now = checked_crash(endpoint, "/check", Answer(status=500))
    start, moments = now, []
    for number in range(1, MAX_ATTEMPTS + 1):
        [asked] = reconcilers.ask_due(now=now)
        moments.append(now)
        assert (asked.attempt, asked.status) == (number, 500)
        assert asked.outcome == ("gave_up" if number == MAX_ATTEMPTS else "retry")
        if number < MAX_ATTEMPTS:
            check = CallCheck.objects.get()
            assert check.next_at == now + BACKOFF[number - 1]
            now = check.next_at
    assert moments[-1] - start <= timedelta(hours=24)
    assert CallCheck.objects.get().state == CallCheck.GAVE_UP
    assert reconcilers.ask_due(now=now + timedelta(days=7)) == []
    assert attempts() == [(500, "", "HTTP 500")] * MAX_ATTEMPTS
    assert not Verdict.objects.exists()


TEN_MB = b"{" + b" " * (10 * 1024 * 1024) + b"}"


@pytest.mark.parametrize(
    ("answer", "error"),
    [
        (Answer(body=b"<html>ok</html>"), "the answer is not JSON"),
        (Answer(body=TEN_MB), "the answer is longer than 64 KiB (not read further)"),
        (Answer(body={"outcome": "maybe", "evidence": "x"}), 'outcome must be "happened", "not_happened" or "unknown", not "maybe"'),
        (Answer(body={"outcome": "happened", "evidence": "x" * 4001}), "evidence has 4001 characters; at most 4000"),
        (Answer(body={"outcome": "happened"}), "evidence must be a string, not null"),
        (Answer(body=["happened"]), 'the answer is not a JSON object but ["happened"]'),
        (Answer(status=302, headers={"location": "http://example.org/"}), "a redirect (not followed)"),
        (Answer(status=404), "HTTP 404"),
    ],
    ids=["not-json", "ten-mb", "unknown-word", "long-evidence", "no-evidence", "not-an-object", "redirect", "404"],
)
@pytest.mark.django_db
def test_an_answer_that_is_not_the_contracts_object_is_an_attempt_never_a_verdict(endpoint, answer, error):
    _, now = checked_crash(endpoint, "/check", answer)
    [asked] = reconcilers.ask_due(now=now)
    assert (asked.outcome, asked.error) == ("retry", error)
    [(status, outcome, said)] = attempts()
    assert (status, outcome, said) == (answer.status, "", error)
    assert not Verdict.objects.exists()
    assert CallCheck.objects.get().state == CallCheck.PENDING


@pytest.mark.django_db
def test_a_check_url_on_a_loopback_address_is_refused_at_connect_without_the_private_setting(endpoint, settings):
    _, now = checked_crash(endpoint, "/check", Answer(body={"outcome": "happened", "evidence": "x"}))
    settings.TURNLOG_WEBHOOK_ALLOW_PRIVATE = False
    [asked] = reconcilers.ask_due(now=now)
    assert asked.outcome == "retry" and asked.status is None
    assert "127.0.0.1 is a loopback address (allowed only with TURNLOG_WEBHOOK_ALLOW_PRIVATE)" in asked.error
    assert endpoint.received == [] and not Verdict.objects.exists()


@pytest.mark.django_db
def test_a_slow_endpoint_times_out_as_an_attempt(endpoint, settings):
    settings.TURNLOG_RECONCILER_TIMEOUT_SECONDS = 0.3
    _, now = checked_crash(endpoint, "/check", Answer(body={"outcome": "happened", "evidence": "x"}, delay=1.5))
    [asked] = reconcilers.ask_due(now=now)
    assert asked.outcome == "retry" and asked.error.startswith("timed out after 0.3 s")
    assert not Verdict.objects.exists()


@pytest.mark.django_db
def test_a_call_a_person_settled_after_it_was_queued_is_not_asked(endpoint, django_user_model):
    from sessions_app.selectors.access import Actor
    from sessions_app.services import verdicts
    from tests.access import member

    _, now = checked_crash(endpoint, "/check", Answer(body={"outcome": "happened", "evidence": "x"}))
    CallCheck.objects.update(created_at=timezone.now() - timedelta(minutes=1))  # queued a minute before the person's verdict
    operator = django_user_model.objects.create_user("op")
    member(operator, "operator")
    verdicts.record_verdict(actor=Actor(operator), session_id="crash-1", call_id="c3", outcome="not_happened", evidence="looked")
    [asked] = reconcilers.ask_due(now=now)
    assert asked.outcome == "skipped" and endpoint.received == [] and attempts() == []
    assert CallCheck.objects.get().state == CallCheck.SETTLED
