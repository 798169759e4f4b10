from dataclasses import dataclass
from datetime import datetime, timedelta

from django.core.management.base import BaseCommand
from django.db import transaction
from django.utils import timezone

from sessions_app import services
from sessions_app.lib import demo
from sessions_app.log import events as log_events
from sessions_app.models import AutoRecoveryPolicy, Event, Session, ToolPolicy
from sessions_app.services.verdicts import record_reconciler_verdict

SPREAD = timedelta(hours=6)  # demo sessions start over this window before now


@dataclass(frozen=True)
class SeededSession:
    session: Session
    scenario: demo.Scenario


SETTLED_TOOL = "charge_card"  # the tool of the crash a reconciler settles
SETTLED_EVIDENCE = "payments table: charge ch_demo_1 found by idempotency key"


def demo_scenario(index: int, count: int) -> demo.Scenario:
    """Every third session crashes mid-turn and the first one compacts. The newest crash (the first
    stalled session in the list) leaves an external call's outcome unknown, to check by hand; the
    crash before it, a charge_card call that a reconciler settles (settle_one)."""
    crashed = [i for i in range(count) if i % 3 == 1]
    if crashed and index == crashed[-1]:
        return demo.stalled_scenario(1000 + index, compaction_rate=0.2)
    if len(crashed) > 1 and index == crashed[-2]:
        return demo.stalled_scenario(1000 + index, tool=SETTLED_TOOL, compaction_rate=0.2)
    return demo.scenario(index, crash_rate=1.0 if index in crashed else 0.0, compaction_rate=1.0 if index == 0 else 0.2)


def seed_sessions(count: int, now: datetime) -> list[SeededSession]:
    """Finished demo sessions (demo_scenario), oldest first.

    Each is written as its agent would have written it: the scenario's batches with their
    original times, oldest session first.
    """
    seeded = []
    for index in range(count):
        scenario = demo_scenario(index, count)
        duration = timedelta(seconds=scenario.duration)
        start = min(now - SPREAD * (count - index) / count, now - duration)
        # The session began with its first event, hours ago, not at seeding time.
        session = services.create_session(
            session_id=scenario.session_id, agent_name=scenario.agent_name, metadata=scenario.metadata, created_at=start
        )
        for batch in demo.timed_batches(scenario, start):
            events = log_events.validate_batch(batch)
            # Received when its agent sent it: the history reads as it would have, stalls included.
            services.append_events(session_id=session.id, events=events, received_at=events[-1].time)
        session.refresh_from_db()
        seeded.append(SeededSession(session, scenario))
    return seeded


def settle_one(seeded: list[SeededSession]) -> tuple[SeededSession, str] | None:
    """Where a reconciler would come in: the verdict it finds for the crashed charge_card call (the second
    newest crash), so the demo shows a settled call beside the ones still to check. (item, call id)"""
    crashed = [item for item in seeded if item.scenario.crashes]
    if len(crashed) < 2:
        return None
    item = crashed[-2]
    call_id = next(cid for cid, name in demo.unknown_effects(item.scenario).items() if name == SETTLED_TOOL)
    record_reconciler_verdict(
        session_id=item.session.id, call_id=call_id, pattern=SETTLED_TOOL, outcome="happened", evidence=SETTLED_EVIDENCE,
        external_ref="ch_demo_1",
    )  # fmt: skip
    return item, call_id


def seed_tool_policies() -> int:
    """The demo tools' side-effect classes, unless someone already keeps tool policies here."""
    if ToolPolicy.objects.exists():
        return 0
    ToolPolicy.objects.bulk_create(
        ToolPolicy(pattern=pattern, side_effect=side_effect, note=note) for pattern, side_effect, note in demo.TOOL_POLICIES
    )
    return len(demo.TOOL_POLICIES)


def seed_auto_recovery_policies() -> int:
    """Automatic recovery for the demo's read-only agent, unless someone already keeps policies here."""
    if AutoRecoveryPolicy.objects.exists():
        return 0
    AutoRecoveryPolicy.objects.bulk_create(AutoRecoveryPolicy(agent_pattern=p, note=note) for p, note in demo.AUTO_RECOVERY_POLICIES)
    return len(demo.AUTO_RECOVERY_POLICIES)


def fork_one(seeded: list[SeededSession]) -> Session | None:
    """Fork the first clean session after its first turn, to show provenance and lineage."""
    for item in seeded:
        if item.scenario.crashes:
            continue
        turn_ends = Event.objects.filter(session=item.session, type="turn_end").order_by("seq")
        first = turn_ends.values_list("seq", flat=True).first()
        if first is not None and first < item.session.event_count - 1:
            return services.fork(session_id=item.session.id, boundary=first, new_session_id=f"{item.session.id}-replay")
    return None


class Command(BaseCommand):
    help = (
        "Fill an empty database with finished demo sessions (some crashed mid-turn), an empty tool policy "
        "table with the demo tools' side-effect classes and an empty auto-recovery policy table with one for the "
        "read-only demo agent; leaves each alone when it holds anything."
    )

    def add_arguments(self, parser):
        parser.add_argument("--sessions", type=int, default=8, help="how many sessions to create (default 8)")

    def handle(self, *args, sessions: int, **options):
        if policies := seed_tool_policies():
            self.stdout.write(f"seed_demo: created {policies} tool policies (edit them in the admin).")
        if policies := seed_auto_recovery_policies():
            self.stdout.write(f"seed_demo: created {policies} auto-recovery policy for the read-only demo agent (edit it in the admin).")
        if Session.objects.exists():
            self.stdout.write("seed_demo: the database already holds sessions; skipped.")
            return
        # One transaction: a failed seed leaves the database empty, so a rerun seeds again.
        with transaction.atomic():
            seeded = seed_sessions(sessions, timezone.now())
            forked = fork_one(seeded)
            settled = settle_one(seeded)
        for item in seeded:
            state = f"crashed {demo.CRASH_POINTS[item.scenario.crash_point]}" if item.scenario.crashes else "clean"
            if settled is not None and settled[0] is item:
                state += f"; {SETTLED_TOOL} settled by reconciler:{SETTLED_TOOL}"
            self.stdout.write(
                f"{item.session.id}  {item.session.agent_name:<18} {item.session.event_count:>4} events  {state}"
            )
        if forked is not None:
            self.stdout.write(f"{forked.id}  forked from {forked.parent_id} at seq {forked.seed_length - 1}")
        self.stdout.write(f"seed_demo: created {len(seeded) + (forked is not None)} demo sessions.")
