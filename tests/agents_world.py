"""A world of agents with known failure counts (tests of the Agents page, its selector and `sessions agents`).

Built through the real services at the real clock (`t0`); what lies outside
the 24-hour or 7-day windows is hourly counts of old hours (AgentHour rows,
as the migration's backfill leaves them) and recoveries aged into the past
together with the crashed turns they counted. Project "alpha" is readable,
"beta" is not; beta's sessions must never count.

billing-bot in alpha (the figures the tests assert):
  sessions  24 h: 4 (b1-b4)      7 d: 7 (+ b6 two days old, + 2 in an hour 3 days ago)
  turns     24 h: 6 (b5's turn started 10 days ago)   7 d: 20 (+ 4 an hour 25 h ago, + 10 three days ago)
  crashed   24 h: 3 (b2, b3 recovered; b4 stalled now)   7 d: 8 (+ b6's two days ago, + 1 at 25 h, + 3 at 3 days)
  rate      24 h: 50 %           7 d: 40 %
  recoveries in 7 d: b3 automatic (300 s quiet), b2 manual (about 600 s), b6 manual and abandoned (about 400 s)
    stalled median 400 s (6 min 40 s), max 600 s (10 min 0 s); strategies restart_turn x3, abandon x1
  b5's recovery (abandoned) is 10 days old: outside every window, like an hour of 100 turns 10 days ago
  stalled now: 1 (b4), so its last failure is b4
"" (no agent name) in alpha: one session, one turn, crashed and recovered (100 %), last failure that recovery.
HTML_NAME in alpha: one clean turn (0 %), no failure.
beta: billing-bot with 5 turns and a stall, and "beta-only": neither counts for alpha's readers.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import F
from django.utils import timezone

from sessions_app import services
from sessions_app.log.events import format_time, validate_batch
from sessions_app.models import AgentHour, AutoRecoveryPolicy, Project, RecoveryRecord

HTML_NAME = '<b>x/y & "z"</b> ?#%'


@dataclass
class AgentsWorld:
    t0: datetime
    alpha: Project
    beta: Project
    user: object


def turns(count: int, *, open_last: bool = False, at: datetime | None = None) -> list[dict]:
    """`count` turns without tool calls (a crash of one is restart_turn); the last left open if asked."""
    events = [{"type": "user_message", "data": {"content": "go"}}]
    for n in range(1, count + 1):
        events.append({"type": "turn_start", "data": {"turn": n}})
        events.append({"type": "assistant_message", "data": {"content": f"turn {n}"}})
        if not (open_last and n == count):
            events.append({"type": "turn_end", "data": {"turn": n, "steps": 0, "reason": "complete"}})
    if at is not None:
        for event in events:
            event["time"] = format_time(at)
    return events


def session(session_id: str, project: Project, agent: str, events: list[dict], *, created_at: datetime | None = None):
    services.create_session(session_id=session_id, project=project, agent_name=agent, created_at=created_at)
    batch = validate_batch(events)
    # Received when written (`at`): a turn left open then is quiet since then by the server's clock too.
    services.append_events(session_id=session_id, events=batch, received_at=batch[-1].time)


def hour_of(when: datetime) -> datetime:
    return when.replace(minute=0, second=0, microsecond=0)


def old_hour(project: Project, agent: str, when: datetime, **counts: int) -> None:
    """Add to an old hour's counts, as appends and recoveries then would have."""
    hour, _ = AgentHour.objects.get_or_create(project=project, agent_name=agent, hour=hour_of(when))
    AgentHour.objects.filter(pk=hour.pk).update(**{name: F(name) + n for name, n in counts.items()})


def age(record: RecoveryRecord, when: datetime) -> None:
    """Move a recovery into the past with the crashed turns it counted (as if it had been applied then)."""
    key = {"project_id": record.session.project_id, "agent_name": record.agent_name}
    AgentHour.objects.filter(**key, hour=hour_of(record.created_at)).update(crashed_turns=F("crashed_turns") - record.turns_closed)
    old_hour(record.session.project, record.agent_name, when, crashed_turns=record.turns_closed)
    RecoveryRecord.objects.filter(pk=record.pk).update(created_at=when)


def build(user, *, readable_role: str = "viewer") -> AgentsWorld:
    from tests.access import member

    t0 = timezone.now().replace(microsecond=0)
    alpha = Project.objects.create(slug="alpha", name="Alpha")
    beta = Project.objects.create(slug="beta", name="Beta")
    member(user, readable_role, alpha)
    bot = "billing-bot"

    session("b1", alpha, bot, turns(1))
    session("b2", alpha, bot, turns(1, open_last=True, at=t0 - timedelta(seconds=600)))
    services.recover(session_id="b2", user=user)
    session("b3", alpha, bot, turns(2, open_last=True, at=t0 - timedelta(seconds=300)))
    policy = AutoRecoveryPolicy.objects.create(agent_pattern="billing-*", min_quiet_seconds=120)
    assert services.recover_automatically(session_id="b3", policy=policy, now=t0).record is not None
    session("b4", alpha, bot, turns(1, open_last=True, at=t0 - timedelta(seconds=1000)))  # stalled now
    session("b5", alpha, bot, turns(1, open_last=True, at=t0 - timedelta(days=10)), created_at=t0 - timedelta(days=10))
    age(services.recover(session_id="b5", user=user, abandon=True).record, t0 - timedelta(days=10))
    session("b6", alpha, bot, turns(1, open_last=True, at=t0 - timedelta(seconds=400)), created_at=t0 - timedelta(days=2))
    age(services.recover(session_id="b6", user=user, abandon=True, note="gave up").record, t0 - timedelta(days=2))
    old_hour(alpha, bot, t0 - timedelta(hours=25), turns=4, crashed_turns=1)
    old_hour(alpha, bot, t0 - timedelta(days=3), sessions=2, turns=10, crashed_turns=3)
    old_hour(alpha, bot, t0 - timedelta(days=10), sessions=9, turns=100, crashed_turns=50)

    session("nameless", alpha, "", turns(1, open_last=True, at=t0 - timedelta(seconds=200)))
    services.recover(session_id="nameless", user=user)
    session("html", alpha, HTML_NAME, turns(1))

    session("beta-bot", beta, bot, turns(5, open_last=True, at=t0 - timedelta(seconds=900)))
    session("beta-only", beta, "beta-only", turns(2, open_last=True, at=t0 - timedelta(seconds=900)))
    services.recover(session_id="beta-only", user=user)
    # A person's recovery records the quiet time at the real clock, a moment after t0:
    # pin it to the quiet time each session was built with, so the figures are exact.
    for session_id, quiet in {"b2": 600, "b6": 400, "nameless": 200, "beta-only": 900}.items():
        RecoveryRecord.objects.filter(session_id=session_id).update(quiet_seconds=quiet)
    return AgentsWorld(t0=t0, alpha=alpha, beta=beta, user=user)
