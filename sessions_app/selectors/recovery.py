"""Recovery reads: a session's plan from the events that can matter, its strategies, its history."""

from __future__ import annotations

from sessions_app.log import events as log_events
from sessions_app.log import policies as log_policies
from sessions_app.log import recovery, strategy
from sessions_app.models import Event, LedgerCall, RecoveryRecord, Session
from sessions_app.selectors.policies import project_policies
from sessions_app.selectors.events import CallLookups, call_lookups, session_log, steps_open_at, to_log_events
from sessions_app.selectors.verdicts import current_verdicts


def recovery_plan(
    session: Session,
    *,
    tail: list[log_events.Event] | None = None,
    placement: dict[int, tuple[int | None, int | None]] | None = None,
    calls: CallLookups | None = None,
) -> recovery.Plan:
    """The session's recovery plan, reading only the events that can matter.

    Everything from the outermost open turn on, plus, before it: tool_call /
    tool_result events and assistant messages naming the same call ids
    (dispatch, result and first sighting are log-wide) and stray turn_ends
    (warnings); and the steps still open where the open turn began. Each is
    an indexed lookup, so the cost follows the open turn, not the log. The
    result equals sessions_app.log.recovery.plan over the whole log.

    A caller that has read every event from the outermost open turn on (a
    page's live frame, which holds the open turn) passes them as `tail`, with
    their `placement` (seq -> (turn_seq, step_seq), as placed_log_events
    reads it) and the `calls` it looked up (covering the tail's call ids),
    and saves the lookups they answer.

    The owed calls' current verdicts (session-log.md 8.2) go into the plan: its synthetic
    results say what was found (so the digest changes with them) and its strategies count them.
    """
    events = Event.objects.filter(session=session)
    if not session.turn_stack:
        return recovery.plan(to_log_events(events.filter(seq__in=session.stray_turn_ends).order_by("seq")))
    outermost = session.turn_stack[0]
    if tail is None or placement is None:
        tail = to_log_events(events.filter(seq__gte=outermost).order_by("seq"))
        step_stack = steps_open_at(session, outermost)
    else:  # steps_open_at, answered by the tail's step_ends
        closed_later = {placement[e.seq][1] for e in tail if e.type == "step_end"}
        step_stack = sorted(s for s in {*session.step_stack, *closed_later} if s is not None and s < outermost)
    # The calls the tail names (as its sightings and dispatches), which the rest of the log may answer.
    call_ids = {
        cid for e in tail if e.type == "assistant_message" for call in log_events.tool_calls_of(e.data) if (cid := log_events.call_id(call)) is not None
    }
    call_ids |= {log_events.call_id(e.data) for e in tail if e.type == "tool_call"} - {None}
    if calls is None or not call_ids <= calls.ids:
        calls = call_lookups(session, call_ids)
    known = {e.seq: e for e in calls.events if e.seq < outermost and log_events.call_id(e.data) in call_ids}
    sighted = {seq for cid in call_ids for seq in calls.sightings.get(cid, ()) if seq < outermost}
    unread = ({seq for seq in session.stray_turn_ends if seq < outermost} | sighted) - known.keys()
    earlier = to_log_events(events.filter(seq__in=unread)) if unread else []
    scanned = sorted([*known.values(), *earlier], key=lambda e: e.seq) + tail
    return recovery.plan(scanned, step_stack=step_stack, verdicts=plan_verdicts(session, call_ids))


def plan_verdicts(session: Session, call_ids: set[str]) -> dict[str, recovery.Verdict]:
    """The current verdicts of the calls among `call_ids` (as the log names them), as the plan reads them.

    Every call an open turn holds is sighted in the tail, so the tail's ids are all the plan can need.
    """
    stored = current_verdicts(session)
    if not stored:
        return {}
    prep = LedgerCall._meta.get_field("call_id").get_prep_value  # a long id is stored as its digest
    return {cid: as_plan_verdict(v) for cid in call_ids if (v := stored.get(prep(cid))) is not None}


def as_plan_verdict(verdict) -> recovery.Verdict:
    return recovery.Verdict(
        outcome=verdict.outcome,
        evidence=verdict.evidence,
        external_ref=verdict.external_ref or None,
        by=verdict.by,
        at=log_events.format_time(verdict.at),
    )


def complete_tail(session: Session, events: list[log_events.Event]) -> list[log_events.Event] | None:
    """The events from the outermost open turn on, when `events` (in seq order) hold every one of them."""
    if not session.turn_stack:
        return None
    tail = [e for e in events if e.seq >= session.turn_stack[0]]
    if len(tail) < session.event_count - session.turn_stack[0] or any(e.seq != session.turn_stack[0] + i for i, e in enumerate(tail)):
        return None
    return tail


def dangling_patch(session: Session) -> list[recovery.Repair]:
    """The turn-blind patch's repairs (reads the whole log: a rare, manual action)."""
    return recovery.patch_dangling_tool_calls(session_log(session))


def side_effect_classes(tool_names, *, project_id: int | None) -> dict[str | None, str]:
    """Each tool's side-effect class by the project's tool policies, keyed by log_events.tool_name of each name given."""
    policies = project_policies(project_id)
    return {name: recovery.side_effect_class(name, policies) for name in {log_events.tool_name(n) for n in tool_names}}


def receipt_pointers(tool_names, *, project_id: int | None) -> dict[str | None, str]:
    """Each tool's receipt pointer by the project's tool policies ("" for none), keyed as side_effect_classes keys."""
    policies = project_policies(project_id)
    found = {}
    for name in {log_events.tool_name(n) for n in tool_names}:
        policy = log_policies.matching(name, policies)
        found[name] = policy.receipt_pointer if policy is not None else ""
    return found


def recovery_strategies(plan: recovery.Plan, *, session: Session) -> list[strategy.TurnStrategy]:
    """The plan's strategies (section 8.1) under the session's project's tool policies as they are now."""
    classes = side_effect_classes((call.name for calls in plan.turn_calls.values() for call in calls), project_id=session.project_id)
    return strategy.strategies(plan, lambda name: classes[log_events.tool_name(name)])


def recovery_history(session: Session) -> list[RecoveryRecord]:
    return list(RecoveryRecord.objects.filter(session=session))  # the pages show the username column, not the user
