"""Agents: failure history per agent name, read from the summaries kept at append and
recovery time (AgentHour, RecoveryRecord), never from the logs."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from statistics import median

from django.db.models import Max, Q, Sum
from django.utils import timezone

from sessions_app.log import pricing
from sessions_app.models import AgentHour, AgentModelHour, RecoveryRecord, Session
from sessions_app.selectors import usage as usage_reads
from sessions_app.selectors.audit import newest_first_page
from sessions_app.selectors.sessions import STALLED, status_filter


AGENT_WINDOWS = {"day": timedelta(hours=24), "week": timedelta(days=7)}


@dataclass(frozen=True)
class AgentWindow:
    """One agent's counts over a window of hourly buckets."""

    sessions: int = 0
    turns: int = 0
    crashed_turns: int = 0

    @property
    def crash_rate(self) -> float | None:
        """Crashed turns / turns started (None without turns; may pass 1 when turns started before the window crash in it)."""
        return self.crashed_turns / self.turns if self.turns else None


@dataclass(frozen=True)
class AgentFailure:
    """An agent's latest failure: a session stalled now, or the newest recovery of open turns."""

    session_id: str
    at: datetime  # stalled: its last activity; recovered: when the recovery was applied
    stalled: bool
    quiet_seconds: float | None = None


@dataclass(frozen=True)
class AgentSummary:
    agent_name: str
    day: AgentWindow
    week: AgentWindow
    # Recoveries of open turns applied within the week:
    automatic: int = 0
    manual: int = 0
    stalled_median: float | None = None  # seconds quiet before recovery
    stalled_max: float | None = None
    strategies: tuple[tuple[str, int], ...] = ()  # (name, count), most seen first; "abandon" when a person abandoned
    stalled_now: int = 0
    last_failure: AgentFailure | None = None


def window_start(now: datetime, span: timedelta) -> datetime:
    """Windows are whole hourly buckets: the one holding `now - span` onwards."""
    return (now - span).replace(minute=0, second=0, microsecond=0)


def agent_summaries(project_ids: list[int], now: datetime | None = None, *, agent_name: str | None = None) -> list[AgentSummary]:
    """Each agent with activity in the last 7 days or a session stalled now, in these projects, by name.

    A constant number of queries whatever the number of events or agents:
    AgentHour sums, the week's recovery records, the stalled sessions, and
    each agent's newest recovery. `agent_name` narrows it to one agent.
    """
    now = now or timezone.now()
    day, week = (window_start(now, span) for span in AGENT_WINDOWS.values())
    named = {} if agent_name is None else {"agent_name": agent_name}
    hours = AgentHour.objects.filter(project_id__in=project_ids, hour__gte=week, hour__lte=now, **named)
    in_day = Q(hour__gte=day)
    sums = hours.values("agent_name").order_by().annotate(
        **{f"week_{n}": Sum(n) for n in ("sessions", "turns", "crashed_turns")},
        **{f"day_{n}": Sum(n, filter=in_day) for n in ("sessions", "turns", "crashed_turns")},
    )
    windows = {
        row["agent_name"]: tuple(
            AgentWindow(*(row[f"{w}_{n}"] or 0 for n in ("sessions", "turns", "crashed_turns"))) for w in ("day", "week")
        )
        for row in sums
    }
    recoveries = RecoveryRecord.objects.filter(kind=RecoveryRecord.RECOVERY, session__project_id__in=project_ids, **named)
    week_records: dict[str, list[tuple]] = {}
    for row in recoveries.filter(created_at__gte=week, created_at__lte=now).values_list(
        "agent_name", "automatic", "abandoned", "strategies", "quiet_seconds"
    ):
        week_records.setdefault(row[0], []).append(row[1:])
    stalled: dict[str, list[tuple[str, datetime]]] = {}
    stalled_rows = Session.objects.filter(project_id__in=project_ids, **named).filter(status_filter(STALLED, now))
    for name, session_id, activity, open_turns in stalled_rows.values_list(
        "agent_name", "id", "last_activity_at", "turn_stack"
    ).order_by("-last_activity_at", "-id"):
        stalled.setdefault(name, []).append((session_id, activity))
        # A stalled session's open turns have crashed already, though no recovery counted them yet.
        counts = windows.get(name, (AgentWindow(), AgentWindow()))
        windows[name] = tuple(
            dataclasses.replace(w, crashed_turns=w.crashed_turns + len(open_turns)) if activity >= start else w
            for w, start in zip(counts, (day, week), strict=True)
        )
    names = set(windows) | set(stalled)
    newest = {}
    if names:
        latest = recoveries.filter(agent_name__in=names).values("agent_name").order_by().annotate(at=Max("created_at"))
        pairs = Q()
        for row in latest:
            pairs |= Q(agent_name=row["agent_name"], created_at=row["at"])
        if latest:
            for name, session_id, at, quiet in recoveries.filter(pairs).order_by("created_at", "id").values_list(
                "agent_name", "session_id", "created_at", "quiet_seconds"
            ):
                newest[name] = AgentFailure(session_id=session_id, at=at, stalled=False, quiet_seconds=quiet)  # the last of a tie wins
    summaries = []
    for name in sorted(names, key=lambda n: (n.casefold(), n)):
        records = week_records.get(name, [])
        quiet = [q for *_, q in records if q is not None]
        seen: dict[str, int] = {}
        for _automatic, abandoned, strategies, _quiet in records:
            for entry in strategies or []:
                if isinstance(entry, dict) and isinstance(entry.get("strategy"), str):
                    seen[entry["strategy"]] = seen.get(entry["strategy"], 0) + 1
            if abandoned:
                seen["abandon"] = seen.get("abandon", 0) + 1
        now_stalled = stalled.get(name, [])
        if now_stalled:  # failing now: the most recently stalled session
            session_id, activity = now_stalled[0]
            last = AgentFailure(session_id=session_id, at=activity, stalled=True, quiet_seconds=(now - activity).total_seconds())
        else:
            last = newest.get(name)
        day_counts, week_counts = windows.get(name, (AgentWindow(), AgentWindow()))
        summaries.append(
            AgentSummary(
                agent_name=name,
                day=day_counts,
                week=week_counts,
                automatic=sum(1 for r in records if r[0]),
                manual=sum(1 for r in records if not r[0]),
                stalled_median=median(quiet) if quiet else None,
                stalled_max=max(quiet) if quiet else None,
                strategies=tuple(sorted(seen.items(), key=lambda item: (-item[1], item[0]))),
                stalled_now=len(now_stalled),
                last_failure=last,
            )
        )
    return summaries


def agent_exists(project_ids: list[int], agent_name: str) -> bool:
    """Whether any session of these projects has this agent name (session_agent_idx)."""
    return Session.objects.filter(project_id__in=project_ids, agent_name=agent_name).exists()


def agent_stalled_sessions(project_ids: list[int], agent_name: str, now: datetime | None = None, *, limit: int = 50) -> list[Session]:
    """The agent's sessions stalled now, most recently active first."""
    sessions = Session.objects.filter(project_id__in=project_ids, agent_name=agent_name).filter(status_filter(STALLED, now))
    return list(sessions.select_related("project").order_by("-last_activity_at", "-id")[:limit])


@dataclass(frozen=True)
class CrashPage:
    items: list[RecoveryRecord]
    next_cursor: str | None


def agent_crashes(project_ids: list[int], agent_name: str, *, before: str | None = None, limit: int = 50) -> CrashPage:
    """The agent's recovered crashes (recoveries of open turns), newest first, keyset-paginated on (time, id)."""
    records = RecoveryRecord.objects.filter(
        kind=RecoveryRecord.RECOVERY, agent_name=agent_name, session__project_id__in=project_ids
    ).select_related("session__project", "policy")
    items, cursor = newest_first_page(records, before=before, limit=limit)
    return CrashPage(items=items, next_cursor=cursor)


USAGE_DAYS = 7


@dataclass(frozen=True)
class AgentUsage:
    """An agent's tokens and cost over the last USAGE_DAYS UTC days: the total, and each day's (oldest first)."""

    agent_name: str
    week: pricing.Bill
    days: tuple  # (date, pricing.Bill)


def agent_usage(project_ids: list[int], now: datetime | None = None, *, agent_name: str | None = None) -> list[AgentUsage]:
    """Tokens and cost per agent and UTC day, from the hourly sums kept at append time (AgentModelHour), each row
    priced at its own hour with its project's prices first; agents with usage, most expensive first."""
    now = now or timezone.now()
    first_day = (now - timedelta(days=USAGE_DAYS - 1)).date()
    start = datetime.combine(first_day, datetime.min.time(), tzinfo=now.tzinfo)
    named = {"agent_name": agent_name} if agent_name is not None else {}
    rows = AgentModelHour.objects.filter(project_id__in=project_ids, hour__gte=start, **named).order_by("hour")
    calls: dict[str, dict] = {}  # agent -> day -> [(usage, hour, pricer)]
    pricers: dict[int, pricing.Pricer] = {}
    for row in rows.values("project_id", "agent_name", "model", "provider", "hour", *usage_reads.KINDS):
        if row["project_id"] not in pricers:
            pricers[row["project_id"]] = usage_reads.pricer_for(row["project_id"])
        day = calls.setdefault(row["agent_name"], {}).setdefault(row["hour"].date(), [])
        day.append((usage_reads.usage_of_row(row), row["hour"], pricers[row["project_id"]]))
    found = []
    for name, by_day in calls.items():
        days = tuple((first_day + timedelta(days=n), _priced(by_day.get(first_day + timedelta(days=n), []))) for n in range(USAGE_DAYS))
        found.append(AgentUsage(name, _priced([c for day in by_day.values() for c in day]), days))
    return sorted(found, key=lambda a: (-a.week.cost, a.agent_name))


def _priced(calls: list) -> pricing.Bill:
    """A Bill of (usage, hour, pricer) triples, each priced by its own project's pricer."""
    bills = [pricing.bill([(usage, hour)], pricer) for usage, hour, pricer in calls]
    counts = {kind: sum(getattr(b, kind) for b in bills) for kind in ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens")}
    models = tuple(dict.fromkeys(m for b in bills for m in b.models))
    unpriced = tuple(dict.fromkeys(m for b in bills for m in b.unpriced))
    return pricing.Bill(**counts, models=models, cost=sum((b.cost for b in bills), Decimal(0)), unpriced=unpriced)
