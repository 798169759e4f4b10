"""Asking: the worker claims each due check (a conditional UPDATE, committed, so of several workers one asks),
asks the policy's check endpoint outside any transaction, and records what came back as an attempt. `happened`
or `not_happened` with evidence is a verdict (by "reconciler:<pattern>") and settles the check; anything else
(`unknown`, a status other than 2xx, a redirect, a timeout, a refused address, an answer that is not the
contract's object) is asked again after BACKOFF, at most MAX_ATTEMPTS times over a day, then given up on.

The request is signed the Standard Webhooks way with the policy's own secret and goes through the webhooks'
guarded client (sessions_app/services/notify/addresses.py): the same address rules, checked at connect.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timedelta

import httpx
import orjson
from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from sessions_app.lib.errors import CallNotFound, InvalidVerdict, SessionNotFound
from sessions_app.log import calls as log_calls
from sessions_app.log import events as log_events
from sessions_app.models import CallCheck, CheckAttempt, Event, LedgerCall, Session, ToolPolicy, Verdict
from sessions_app.models.verdicts import HAPPENED, NOT_HAPPENED, UNKNOWN
from sessions_app.selectors.policies import project_policies

from .. import verdicts
from ..event_rows import locked_session
from ..notify import addresses
from ..notify.delivery import signed_headers
from ..publishing import publish_notes_changed_on_commit, publish_session_changed_on_commit
from .scheduling import check_policy

MAX_ATTEMPTS = 8
# The wait after the n-th attempt that settled nothing; 18 hours in all, so the eighth attempt comes within a day.
BACKOFF = tuple(timedelta(minutes=m) for m in (1, 5, 15, 45, 120, 300, 600))
BODY_MAX = 64 * 1024  # an answer is a small object; a longer one is refused unread
CLAIM_MARGIN = timedelta(seconds=30)  # a claim outlives its request's timeout by this much; a crashed worker's expires
ERROR_CHARS = 500
SETTLED, RETRY, GAVE_UP, SKIPPED = "settled", "retry", "gave_up", "skipped"
ANSWERS = (HAPPENED, NOT_HAPPENED, UNKNOWN)


@dataclass(frozen=True)
class Asked:
    """What one ask did: settled (a verdict), retry, gave_up (out of attempts), or skipped (settled meanwhile)."""

    session_id: str
    call_id: str
    pattern: str
    outcome: str
    attempt: int = 0
    status: int | None = None
    answer: str = ""  # the outcome word the endpoint gave, if it gave a valid one
    error: str = ""


class BadAnswer(ValueError):
    """The endpoint's answer is not the contract's object: why, in words for the attempt's error."""


def timeout() -> float:
    return settings.TURNLOG_RECONCILER_TIMEOUT_SECONDS


def _due(now: datetime) -> Q:
    return Q(state=CallCheck.PENDING, next_at__lte=now) & (Q(claimed_until__isnull=True) | Q(claimed_until__lt=now))


def claim_due(*, now: datetime, limit: int) -> list[int]:
    """Up to `limit` due checks, oldest due first, each claimed (committed) for its request's time."""
    if limit <= 0:
        return []
    until = now + timedelta(seconds=timeout()) + CLAIM_MARGIN
    claimed = []
    for check_id in CallCheck.objects.filter(_due(now)).order_by("next_at", "id").values_list("pk", flat=True)[: limit * 2]:
        if CallCheck.objects.filter(_due(now), pk=check_id).update(claimed_until=until):
            claimed.append(check_id)  # else another worker claimed it meanwhile
        if len(claimed) >= limit:
            break
    return claimed


def ask_due(*, now: datetime | None = None, limit: int = 50) -> list[Asked]:
    """Claim and ask the due checks one after another (`recovery_worker --once`, tests); the worker's rounds
    ask them in threads instead (pool.Asker)."""
    now = now or timezone.now()
    with addresses.client(timeout()) as client:
        return [ask(check_id, now=now, client=client) for check_id in claim_due(now=now, limit=limit)]


@dataclass(frozen=True)
class Question:
    url: str
    secret: str
    pattern: str
    call_id: str  # the call's id as the log has it (the check stores the column's form)
    body: dict


def ask(check_id: int, *, now: datetime | None = None, client: httpx.Client | None = None) -> Asked:
    """Ask about one claimed check and record the attempt (`now` is the attempt's time, for its backoff)."""
    now = now or timezone.now()
    check = CallCheck.objects.select_related("session", "project").filter(pk=check_id).first()
    if check is None or check.state != CallCheck.PENDING:
        return Asked("", "", "", SKIPPED, error="no longer pending")
    settled = Verdict.objects.filter(session_id=check.session_id, call_id=check.call_id, withdrawn_at__isnull=True, at__gte=check.created_at)
    if settled.exists():  # someone settled it since it was queued: nothing to ask
        CallCheck.objects.filter(pk=check.pk).update(state=CallCheck.SETTLED, claimed_until=None)
        return Asked(check.session_id, check.call_id, "", SKIPPED, error="settled meanwhile")
    question = _question(check)
    if isinstance(question, str):
        return _record(check, at=now, pattern="", call_id=check.call_id, error=question)
    if client is None:
        with addresses.client(timeout()) as own:
            return _ask(own, check, question, now)
    return _ask(client, check, question, now)


def _question(check: CallCheck) -> Question | str:
    """The request for the check, or why none can be made."""
    row = LedgerCall.objects.filter(session_id=check.session_id, call_id=check.call_id).first()
    if row is None:
        return "the call is not in the session's ledger"
    policy = check_policy(row.tool, project_policies(check.project_id))
    if policy is None:
        return f"no tool policy with a check_url matches {row.tool!r} any more"
    secret = ToolPolicy.objects.filter(pk=policy.id).values_list("check_secret", flat=True).first()
    if not secret:
        return f"the policy {policy.pattern!r} has no check secret"
    call, dispatched_at = _call_of(check.session, row)
    call_id = log_events.call_id(call) or check.call_id
    body = {
        "type": "call.check",
        "session_id": check.session_id,
        "project": check.project.slug,
        "agent_name": check.session.agent_name,
        "call_id": call_id,
        "name": log_calls.call_name(call) if call is not None else row.tool,
        "arguments": log_calls.call_arguments(call) if call is not None else None,
        "idempotency_key": row.idempotency_key,
        "dispatched_at": log_events.format_time(dispatched_at),
    }
    return Question(policy.check_url, secret, policy.pattern, call_id, body)


def _call_of(session: Session, row: LedgerCall) -> tuple[dict | None, datetime]:
    """The call as its first sighting wrote it, and when it was dispatched: its first tool_call event's time,
    else its first sighting's. Two indexed reads (by call id, then one seq)."""
    # Sorted here: ORDER BY seq could lure SQLite's planner onto a scan of the whole log (selectors.events).
    dispatches = sorted(Event.objects.filter(session=session, call_id=row.call_id, type="tool_call").values_list("seq", "time", "data"))
    sighting = Event.objects.filter(session=session, seq=row.seq).values_list("type", "data").first()
    call = None
    if sighting is not None:
        kind, data = sighting
        candidates = [data] if kind == "tool_call" else [*log_events.tool_calls_of(data), *log_calls.content_calls(data)]
        call = next((c for c in candidates if _is(c, row.call_id)), None)
    if call is None and dispatches:
        call = dispatches[0][2]
    return (call if isinstance(call, dict) else None), (dispatches[0][1] if dispatches else row.time)


def _is(call: object, stored_id: str) -> bool:
    cid = log_events.call_id(call) if isinstance(call, dict) else None
    if cid is None and isinstance(call, dict):
        cid = call.get("id")  # content_calls' entries carry the id as read
    return isinstance(cid, str) and LedgerCall._meta.get_field("call_id").get_prep_value(cid) == stored_id


def _ask(client: httpx.Client, check: CallCheck, question: Question, now: datetime) -> Asked:
    body = orjson.dumps(question.body)
    # Signed at the real time (a receiver checks the timestamp), whatever moment the round runs for.
    headers = signed_headers(question.secret, f"chk_{check.pk}_{check.attempts + 1}", timezone.now(), body, user_agent="Turnlog-Reconciler")
    status, data, error = None, b"", ""
    deadline = time.monotonic() + timeout()
    try:
        with client.stream("POST", question.url, content=body, headers=headers) as response:
            status = response.status_code
            if 300 <= status < 400:
                error = "a redirect (not followed)"
            elif not 200 <= status < 300:
                error = f"HTTP {status}"
            else:
                data, error = _read(response, deadline)
    except httpx.TimeoutException as exc:
        error = f"timed out after {timeout():g} s ({type(exc).__name__})"
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        error = f"{type(exc).__name__}: {exc}"
    if error:
        return _record(check, at=now, pattern=question.pattern, call_id=question.call_id, status=status, error=error)
    try:
        outcome, evidence, external_ref = read_answer(data)
    except BadAnswer as exc:
        return _record(check, at=now, pattern=question.pattern, call_id=question.call_id, status=status, error=str(exc))
    if outcome == UNKNOWN:
        said = f"the reconciler does not know yet: {evidence}" if evidence else "the reconciler does not know yet"
        return _record(check, at=now, pattern=question.pattern, call_id=question.call_id, status=status, answer=UNKNOWN, error=said)
    return _record(
        check, at=now, pattern=question.pattern, call_id=question.call_id, status=status, answer=outcome,
        verdict=(outcome, evidence, external_ref),
    )  # fmt: skip


def _read(response: httpx.Response, deadline: float) -> tuple[bytes, str]:
    """The answer's body, at most BODY_MAX bytes and within the timeout; else why not (the rest is not read)."""
    data = bytearray()
    for chunk in response.iter_bytes():
        data += chunk
        if len(data) > BODY_MAX:
            return b"", f"the answer is longer than {BODY_MAX // 1024} KiB (not read further)"
        if time.monotonic() > deadline:
            return b"", f"timed out after {timeout():g} s reading the answer"
    return bytes(data), ""


def read_answer(data: bytes) -> tuple[str, str, str]:
    """(outcome, evidence, external_ref) of a valid answer; BadAnswer saying what is wrong otherwise."""
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        raise BadAnswer("the answer is not JSON") from None
    if not isinstance(value, dict):
        raise BadAnswer(f"the answer is not a JSON object but {log_events.show_json(value)[:100]}")
    outcome = value.get("outcome")
    if outcome not in ANSWERS:
        shown = log_events.show_json(outcome)[:100] if "outcome" in value else "missing"
        raise BadAnswer(f'outcome must be "happened", "not_happened" or "unknown", not {shown}')
    evidence = value.get("evidence")
    if outcome == UNKNOWN and (evidence is None or (isinstance(evidence, str) and len(evidence) <= verdicts.EVIDENCE_MAX)):
        return outcome, (evidence or "").replace("\x00", ""), ""
    try:
        return outcome, verdicts.checked_evidence(evidence), verdicts.checked_external_ref(value.get("external_ref"))
    except InvalidVerdict as exc:
        raise BadAnswer(exc.detail) from None


def _record(
    check: CallCheck, *, at: datetime, pattern: str, call_id: str, status: int | None = None, answer: str = "",
    error: str = "", verdict: tuple[str, str, str] | None = None,
) -> Asked:  # fmt: skip
    """The attempt, the verdict it brought (if any), and what the check does next, in one transaction."""
    with transaction.atomic():
        try:
            locked_session(check.session_id)  # the session first, as recoveries and verdicts lock it
        except SessionNotFound:
            return Asked(check.session_id, call_id, pattern, SKIPPED, error="the session is gone")
        locked = CallCheck.objects.select_for_update().filter(pk=check.pk).first()
        if locked is None:
            return Asked(check.session_id, call_id, pattern, SKIPPED, error="the check is gone")
        number = locked.attempts + 1
        if verdict is not None:
            outcome, evidence, external_ref = verdict
            try:
                verdicts.record_reconciler_verdict(
                    session_id=locked.session_id, call_id=call_id, pattern=pattern, outcome=outcome, evidence=evidence,
                    external_ref=external_ref, now=at,
                )  # fmt: skip
            except (CallNotFound, InvalidVerdict) as exc:
                verdict, error = None, f"not recorded: {exc}"
        CheckAttempt.objects.create(
            session_id=locked.session_id, call_id=locked.call_id, pattern=pattern, at=at, status=status, outcome=answer, error=error[:ERROR_CHARS]
        )
        if verdict is not None:
            outcome, state = SETTLED, CallCheck.SETTLED
        elif number >= MAX_ATTEMPTS:
            outcome, state = GAVE_UP, CallCheck.GAVE_UP
        else:
            outcome, state = RETRY, CallCheck.PENDING
            locked.next_at = at + BACKOFF[min(number, len(BACKOFF)) - 1]
        locked.attempts, locked.state, locked.claimed_until = number, state, None
        locked.save(update_fields=["attempts", "state", "next_at", "claimed_until"])
        if verdict is None:  # a verdict publishes itself; an attempt shows on the call's card too
            seqs = LedgerCall.objects.filter(session_id=locked.session_id, call_id=locked.call_id).values_list("seq", "result_seq").first()
            publish_notes_changed_on_commit(locked.session_id, [s for s in seqs or () if s is not None])
            publish_session_changed_on_commit(locked.session_id)
    return Asked(locked.session_id, call_id, pattern, outcome, number, status, answer, error[:ERROR_CHARS])
