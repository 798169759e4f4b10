"""The automatic recovery worker's rounds (session-log.md section 8.1): thin orchestration over services.

One round: sessions past their project's retention deleted (sessions_app/services/retention), finished OTLP runs closed,
sessions that stalled told to their project's webhooks (sessions_app/services/notify: a notification each), calls with
an unknown outcome handed to their reconcilers (sessions_app/services/reconcilers, in threads of their own), then the
candidates in one indexed query (stalled, quiet for at least
the smallest enabled policy's time, not left for a person), the policy of each
one's agent, then services.recover_automatically, which decides everything
again under the locks; last, crashes a reconciler settled, where the project asks for that (services/settled_recovery).
`manage.py recovery_worker` runs rounds on a clock.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import F
from django.utils import timezone

from sessions_app import services
from sessions_app.lib.errors import SessionNotFound
from sessions_app.models import AutoRecoveryPolicy, Session
from sessions_app.services import notify, receipts, reconcilers, retention, settled_recovery, usage

RECOVERED, HELD, SKIPPED, CLOSED = "recovered", "held", "skipped", "closed"
STALLED = "stalled"  # a stall's notification written (its deliveries are sent by deliver_webhooks)
CHECKED = "checked"  # a reconciler asked about a call (its attempt's outcome in `why`)
DELETED, KEPT = "deleted", "kept"  # retention: a session deleted, or past retention and kept (blocked, or forked)
# Candidates per round, oldest first; the rest wait for the next round.
ROUND_LIMIT = 200


@dataclass(frozen=True)
class Action:
    """What one round did with one candidate session."""

    # recovered | held (the agent passed its hourly limit) | skipped | closed (a finished OTLP run) | stalled | deleted | kept
    # | checked
    outcome: str
    session_id: str
    agent_name: str
    policy: str | None
    why: str = ""
    record_id: int | None = None
    strategies: tuple[str, ...] = ()

    def line(self) -> str:
        agent = self.agent_name or "(no agent name)"
        text = f"{self.outcome} {self.session_id} agent={agent} policy={self.policy or '-'}"
        if self.strategies:
            text += f" strategies={','.join(self.strategies)}"
        if self.record_id is not None:
            text += f" record={self.record_id}"
        return f"{text} ({self.why})" if self.why else text


def policy_for(agent_name: str, policies: Iterable[AutoRecoveryPolicy]) -> AutoRecoveryPolicy | None:
    """The policy of an agent: its exact name wins, then the longest matching pattern.

    Disabled policies match too, so a disabled `indexer-*` stops a broader `*`
    (as recovery.side_effect_class picks a tool's policy).
    """
    matches = [
        (p.agent_pattern != agent_name, -len(p.agent_pattern), p.agent_pattern, p)
        for p in policies
        if p.agent_pattern == agent_name or fnmatch.fnmatchcase(agent_name, p.agent_pattern)
    ]
    return min(matches, key=lambda m: m[:3])[3] if matches else None


def run_round(*, now: datetime | None = None, limit: int = ROUND_LIMIT) -> list[Action]:
    """One round: retention's sweep, finished OTLP runs closed, stalls notified, then automatic recovery; what it did
    with each session."""
    now = now or timezone.now()
    actions = sweep_retention(now=now)
    actions += close_finished_runs(now=now)
    actions += notify_stalls(now=now)
    actions += check_calls(now=now)
    usage.recompute_costs()  # stored costs priced again after a price change (the list sorts by them)
    policies = list(AutoRecoveryPolicy.objects.all())
    enabled = [p for p in policies if p.enabled]
    if not enabled:
        return actions + recover_settled_crashes(now=now, policies=policies, limit=limit)
    quietest = min(p.quiet_seconds for p in enabled)
    # One indexed query (session_interrupted_idx): no log is read here.
    candidates = (
        Session.objects.filter(
            interrupted=True,
            repeated_failures_at__isnull=True,
            last_activity_at__lte=now - timedelta(seconds=quietest),
        )
        # Found unsafe to restart at this length: nothing new to decide on until the log grows.
        .exclude(auto_checked_count=F("event_count"))
        .order_by("last_activity_at", "id")
        .values_list("id", "agent_name", "last_activity_at")[:limit]
    )
    for session_id, agent_name, last_activity_at in candidates:
        policy = policy_for(agent_name, policies)
        if policy is None or not policy.enabled:
            continue  # no automatic recovery for this agent: the session waits for a person
        if (now - last_activity_at).total_seconds() < policy.quiet_seconds:
            continue  # not quiet for its own policy's time yet: a later round
        actions.append(_recover(session_id, agent_name, policy, now))
    return actions + recover_settled_crashes(now=now, policies=policies, limit=limit)


def check_calls(*, now: datetime) -> list[Action]:
    """Calls with an unknown outcome get their reconciler's check, and the due checks go to the reconciler
    threads (a slow endpoint holds up nothing here); what the threads finished since the last round."""
    if not reconcilers.any_reconciler():  # no policy names an endpoint: nothing to schedule or ask
        return [_checked(a) for a in _asker().finished() if a.outcome != "skipped"]
    reconcilers.schedule_checks(now=now, known=True)
    asked = _asker().start_due(now=now)
    return [_checked(a) for a in asked if a.outcome != "skipped"]


def finish_checks() -> list[Action]:
    """Wait for the checks still being asked (`recovery_worker --once`, shutdown, tests)."""
    return [_checked(a) for a in _asker().wait() if a.outcome != "skipped"]


def _checked(asked: reconcilers.Asked) -> Action:
    said = f"attempt {asked.attempt}: {asked.outcome}" + (f", HTTP {asked.status}" if asked.status else "")
    said += f", {asked.answer}" if asked.answer else ""
    said += f" ({asked.error})" if asked.error else ""
    return Action(CHECKED, asked.session_id, "", f"reconciler:{asked.pattern}" if asked.pattern else None, f"call {asked.call_id} {said}")


_ASKER: list[reconcilers.Asker] = []  # one per process, made at its first round


def _asker() -> reconcilers.Asker:
    if not _ASKER:
        _ASKER.append(reconcilers.Asker(settings.TURNLOG_RECONCILER_THREADS))
    return _ASKER[0]


def recover_settled_crashes(*, now: datetime, policies: list[AutoRecoveryPolicy], limit: int = ROUND_LIMIT) -> list[Action]:
    """Stalled sessions whose every unknown external call a reconciler settled, recovered with the recovery
    context where their project asks for it (settled_recovery decides again under the locks)."""
    actions = []
    for session_id, agent_name, _ in settled_recovery.candidates(now=now, limit=limit):
        policy = policy_for(agent_name, policies)
        if policy is not None and not policy.enabled:
            continue  # a disabled policy keeps this agent's sessions for a person
        pattern = policy.agent_pattern if policy is not None else None
        try:
            result = settled_recovery.recover_settled(session_id=session_id, policy=policy, now=now)
        except (SessionNotFound, AutoRecoveryPolicy.DoesNotExist):
            continue
        if result is not None and result.record is not None:
            record = result.record
            actions.append(Action(RECOVERED, session_id, agent_name, pattern, record.note, record.pk, tuple(record.strategy_names)))
        elif Session.objects.filter(pk=session_id, repeated_failures_at__isnull=False).exists():
            actions.append(Action(HELD, session_id, agent_name, pattern, "repeated failures: past the hourly limit of automatic recoveries"))
    return actions


def sweep_retention(*, now: datetime) -> list[Action]:
    """Sessions past their project's retention deleted, and those kept past it listed with why (every round: the
    command says each once)."""
    swept = retention.sweep(now=now)
    actions = [Action(DELETED, gone.session_id, gone.agent_name, "retention", f"{gone.events} events") for gone in swept.deleted]
    return actions + [Action(KEPT, held.session_id, held.agent_name, "retention", f"past retention, kept: {held.why}") for held in swept.kept]


def close_finished_runs(*, now: datetime) -> list[Action]:
    """The turn_end of each OTLP run whose root arrived and whose trace is quiet for the settle time,
    where no server process closed it (one restarted before its settle time was up). Before recovery,
    so that a finished run is never taken for a crash."""
    # The spans a restart left held for their conversation: written once quiet (a round of traces at a time).
    while services.release_held_spans(now=now, next_due=False).traces:
        pass
    session_ids = services.sessions_to_settle(now=now)
    for start in range(0, len(session_ids), 200):  # a transaction per 200 (SQLite's write lock is held meanwhile)
        services.close_settled_turns(session_ids=session_ids[start : start + 200], now=now)
    return [Action(CLOSED, session_id, "", None, "finished OTLP run: its turn closed after the settle time") for session_id in session_ids]


def notify_stalls(*, now: datetime) -> list[Action]:
    """A notification for each session that stalled since the last round (after finished runs are closed: those
    are no crash), with a delivery to each webhook of its project that asks for stalls."""
    told = [(n, n.deliveries.count()) for n in notify.record_stalls(now=now)]
    # Said only where a webhook is told: a stall alone is the Sessions page's news, not the worker's.
    return [Action(STALLED, n.session_id, n.payload["session"]["agent_name"], None, f"told {count} webhook(s)") for n, count in told if count]


def deliver_webhooks(*, now: datetime | None = None) -> list[notify.Sent]:
    """The webhook deliveries that are due, sent (the command does this every second, between rounds)."""
    return notify.send_due(now=now)


# Batches of receipts re-read per tick of the worker's loop (a few seconds' work), between deliveries.
SWEEP_BATCHES_PER_TICK = 5


def sweep_receipts(*, batches: int | None = SWEEP_BATCHES_PER_TICK) -> int:
    """Stored calls' receipts re-read after tool policies changed (services.receipts), up to `batches`
    batches (None: until every sweep is done); the number of calls read."""
    return receipts.run_sweeps(batches=batches)


def _recover(session_id: str, agent_name: str, policy: AutoRecoveryPolicy, now: datetime) -> Action:
    def action(outcome, why="", **more):
        return Action(outcome, session_id, agent_name, policy.agent_pattern, why, **more)

    try:
        result = services.recover_automatically(session_id=session_id, policy=policy, now=now)
    except SessionNotFound:
        return action(SKIPPED, "deleted")
    except AutoRecoveryPolicy.DoesNotExist:
        return action(SKIPPED, "policy deleted")
    if result is not None and result.record is not None:
        record = result.record
        return action(RECOVERED, record_id=record.pk, strategies=tuple(record.strategy_names))
    if Session.objects.filter(pk=session_id, repeated_failures_at__isnull=False).exists():
        return action(HELD, f"repeated failures: more than {policy.max_per_hour} automatic recoveries in an hour")
    return action(SKIPPED, "not safe to restart, no longer stalled, or already recovered")
