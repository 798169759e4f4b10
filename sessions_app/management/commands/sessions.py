"""Operator commands: list, status, recover, fork and delete sessions from the command line, and retention's state."""

from __future__ import annotations

import json
import re

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from sessions_app import selectors, services
from sessions_app.lib import errors
from sessions_app.lib.params import BadParameter, decimal_int
from sessions_app.lib.wording import agent_label, duration, percent, seq_range, strategy_counts, verdict_words
from sessions_app.log import clock as log_clock
from sessions_app.log import fork as log_fork
from sessions_app.log import recovery as log_recovery
from sessions_app.log import strategy as log_strategy
from sessions_app.log.events import format_time, tool_name
from sessions_app.models import SESSION_ID_PATTERN, Project, Role, session_id_validator

# The Agents page's own wording of its figures, so the table reads the same here.
from sessions_app.selectors import access
from sessions_app.services import retention, verdicts


def printable(text: str) -> str:
    """Text for one table cell: control characters (a newline in an agent name) shown escaped."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


class Command(BaseCommand):
    help = (
        "Inspect and repair sessions: list, status, recover, fork, delete; agents: failure history per agent;"
        " retention: the sessions past their project's retention (and --sweep to delete them now)."
    )

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        listing = sub.add_parser("list", help="sessions, newest activity first")
        listing.add_argument("--interrupted", action="store_true", help="only sessions with an open turn")
        listing.add_argument("--status", choices=selectors.STATUSES, help="only sessions with this status")
        listing.add_argument("--limit", type=int, default=50)
        status = sub.add_parser("status", help="open turns and owed calls of a session")
        status.add_argument("session_id")
        calls = sub.add_parser("calls", help="a session's calls as its ledger panel lists them, with their verdicts")
        calls.add_argument("session_id")
        calls.add_argument("--all", dest="all_calls", action="store_true", help="every call (default: external effects and tools without a policy)")
        recover = sub.add_parser("recover", help="preview and apply a session's recovery plan")
        recover.add_argument("session_id")
        recover.add_argument("--yes", action="store_true", help="apply without asking")
        recover.add_argument("--note", default="", help="why, for the audit trail")
        recover.add_argument("--context", action="store_true", help="also append a recovery-context system message for the agent")
        recover.add_argument("--abandon", action="store_true", help="record the turns as abandoned instead of the recommended strategy")
        recover.add_argument("--user", default="", help="who confirms: an operator of the session's project or a superuser (default: the first superuser)")

        fork = sub.add_parser("fork", help="copy a session up to a boundary into a new session")
        fork.add_argument("session_id")
        fork.add_argument("--at", required=True, help='the seq of the last event to inherit, or "last"')
        fork.add_argument("--id", dest="new_id", default=None, help="the new session's id (generated when absent)")
        listing.add_argument("--project", metavar="SLUG", help="only sessions of this project")
        agents = sub.add_parser("agents", help="failure history per agent: the Agents page's table")
        agents.add_argument("--project", metavar="SLUG", help="only this project's sessions (default: every project)")
        delete = sub.add_parser("delete", help="delete a whole session with everything that hangs on it (audited)")
        delete.add_argument("session_id")
        delete.add_argument("--yes", action="store_true", help="delete without asking")
        kept = sub.add_parser("retention", help="sessions past their project's retention that are kept, and why")
        kept.add_argument("--project", metavar="SLUG", help="only this project")
        kept.add_argument("--sweep", action="store_true", help="first delete those that may go, as the worker does")
        verdict = sub.add_parser("verdict", help="record (or --withdraw) what you found out about one call of a session")
        verdict.add_argument("session_id")
        verdict.add_argument("call_id")
        verdict.add_argument("--outcome", choices=["happened", "not_happened"], help="what the outside system shows")
        verdict.add_argument("--evidence", default=None, help="what you found and where (1 to 4000 characters)")
        verdict.add_argument("--ref", default=None, help="the outside system's reference (a charge id, a message id)")
        verdict.add_argument("--withdraw", action="store_true", help="withdraw the call's current verdict instead")
        verdict.add_argument("--reason", default=None, help="why it is withdrawn")
        verdict.add_argument("--user", default="", help="who records it: an operator of the session's project or a superuser (default: the first superuser)")
        for command in (status, calls, recover, fork, delete, verdict):
            command.add_argument("--project", metavar="SLUG", help="refuse the session unless it is in this project")

    def handle(self, *args, action: str, project: str | None, **options):
        try:
            getattr(self, action)(project=self.project(project), **options)
        except (errors.SessionNotFound, errors.SessionExists, errors.SessionHasForks, errors.CallNotFound, errors.VerdictNotFound) as exc:
            raise CommandError(str(exc)) from None
        except errors.InvalidVerdict as exc:
            raise CommandError(f"{exc.field}: {exc.detail}. Nothing was recorded.") from None

    def project(self, slug: str | None) -> Project | None:
        if slug is None:
            return None
        project = Project.objects.filter(slug=slug).first()
        if project is None:
            known = ", ".join(Project.objects.values_list("slug", flat=True)) or "none"
            raise CommandError(f"--project {slug!r}: no such project (projects: {known}).")
        return project

    def session(self, session_id: str, project: Project | None):
        """The session, if it is in `project` (when one is named): a command names one project's session by mistake otherwise."""
        session = selectors.get_session(session_id)
        if project is not None and session.project_id != project.pk:
            raise CommandError(f"No session {session_id!r} in project {project.slug!r}.")
        return session

    def list(self, *, project: Project | None, interrupted: bool, status: str | None, limit: int, **_):
        page = selectors.list_sessions(
            interrupted=True if interrupted else None,
            status=status,
            projects=None if project is None else [project.pk],
            limit=limit,
            labelled=True,
        )
        if not page.items:
            which = "interrupted sessions" if interrupted else f"{status} sessions" if status else "sessions"
            self.stdout.write(f"No {which}{f' in project {project.slug!r}' if project else ''}.")
            return
        self.stdout.write(f"{'SESSION':<34} {'PROJECT':<16} {'AGENT':<20} {'STATUS':<10} {'EVENTS':>7}  {'LAST ACTIVITY':<20}  OPEN TURNS")
        for session in page.items:
            turns = "; ".join(session.open_turn_labels) or "-"
            self.stdout.write(
                f"{session.id:<34} {session.project.slug:<16} {session.agent_name or '-':<20} {session.status:<10} {session.event_count:>7}  "
                f"{format_time(session.last_activity_at):<20}  {turns}"
            )

    def agents(self, *, project: Project | None, **_):
        """The Agents page's columns as a text table (selectors.agent_summaries, as the page reads them)."""
        ids = list(Project.objects.values_list("pk", flat=True)) if project is None else [project.pk]
        summaries = selectors.agent_summaries(ids)
        if not summaries:
            self.stdout.write(f"No agent active in the last 7 days{f' in project {project.slug!r}' if project else ''}, and none stalled.")
            return
        header = (
            "AGENT", "SESS 24H", "SESS 7D", "TURNS 24H", "TURNS 7D", "CRASHED 24H", "CRASHED 7D", "RATE 24H", "RATE 7D",
            "STALLED MEDIAN", "STALLED MAX", "AUTO", "MANUAL", "STALLED NOW", "LAST FAILURE", "STRATEGIES",
        )
        rows = []
        for a in summaries:
            failure = a.last_failure
            last = "-" if failure is None else f"stalled {failure.session_id}" if failure.stalled else f"{format_time(failure.at)} {failure.session_id}"
            rows.append((
                printable(agent_label(a.agent_name)), a.day.sessions, a.week.sessions, a.day.turns, a.week.turns,
                a.day.crashed_turns, a.week.crashed_turns, percent(a.day.crash_rate), percent(a.week.crash_rate),
                duration(a.stalled_median), duration(a.stalled_max), a.automatic, a.manual, a.stalled_now, last,
                strategy_counts(a.strategies),
            ))  # fmt: skip
        widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
        for row in [header, *rows]:
            cells = [str(v).ljust(w) if i in (0, 14, 15) else str(v).rjust(w) for i, (v, w) in enumerate(zip(row, widths))]
            self.stdout.write("  ".join(cells).rstrip())

    def status(self, *, project: Project | None, session_id: str, **_):
        session = self.session(session_id, project)
        plan = selectors.recovery_plan(session)
        self.stdout.write(f"Session {session.id} ({session.agent_name or 'no agent name'}): {session.event_count} events, {session.status}")
        self.stdout.write(f"Last activity {format_time(session.last_activity_at)} (by the server's clock)")
        if note := log_clock.skew_note(session.last_event_at, session.last_received_at, settings.TURNLOG_CLOCK_SKEW_SECONDS):
            self.stdout.write(self.style.WARNING(
                f"Agent {note}: its latest event claims {format_time(session.last_event_at)}, received {format_time(session.last_received_at)}"
            ))  # fmt: skip
        if session.parent_id:
            self.stdout.write(f"Forked from {session.parent_id} at seq {session.seed_length - 1}")
        if session.repeated_failures_at:
            self.stdout.write(self.style.ERROR(
                f"Repeated failures: automatic recovery stopped for this agent at {format_time(session.repeated_failures_at)}; a person must decide."
            ))  # fmt: skip
        self.describe_plan(session, plan)

    def calls(self, *, project: Project | None, session_id: str, all_calls: bool, **_):
        """One line a call: its id, tool and state, then what a verdict found (worded as the card and the ledger say it)."""
        session = self.session(session_id, project)
        rows = selectors.session_ledger(session, all_classes=all_calls).rows
        if not rows:
            self.stdout.write("No tool call." if all_calls else "No call of a tool with external effects or without a policy (--all lists every call).")
        for row in rows:
            said = f"{row.call.state}, {verdict_words(row.verdict)}" if row.verdict else row.call.state
            line = f"  seq {row.call.seq}  {printable(str(row.call.call_id))}  {printable(str(row.call.name or '?'))}  {row.side_effect}  {printable(said)}"
            self.stdout.write(self.style.SUCCESS(line) if row.verdict else line)

    def describe_plan(self, session, plan) -> None:
        for warning in plan.warnings:
            self.stdout.write(self.style.WARNING(f"warning: {warning}"))
        if not plan.interrupted:
            self.stdout.write(self.style.SUCCESS("No open turn: nothing to recover."))
            return
        owed = [r.call for r in plan.repairs if r.call is not None]
        side_effects = selectors.side_effect_classes((c.name for c in owed), project_id=session.project_id)
        self.stdout.write(self.style.WARNING(f"Open: {'; '.join(session.open_turn_labels)}"))
        if not owed:
            self.stdout.write("No tool call is owed a result.")
        found = {r.call.id: r.data["metadata"].get("verdict") for r in plan.repairs if r.call is not None}
        for call in owed:
            # Worded as on the recovery page and the transcript (sessions_app.log.recovery); a verdict beside the risk.
            verdict = found.get(call.id)
            risk = call.risk + (f", {log_strategy.verdict_label(verdict['outcome'], verdict['by'], verdict['evidence'])}" if verdict else "")
            self.stdout.write(
                f"  {call.id}  {call.name or '?'}({json.dumps(call.arguments)[:60]})  "
                f"{log_recovery.RISK_HEADLINES[call.risk]} ({risk})  rule {call.rule}  evidence seqs {list(call.evidence) or '-'}  "
                f"side effect: {side_effects[tool_name(call.name)]}\n"
                f"    Why (rule {call.rule}): {log_recovery.rule_reason(call.rule, inferred=call.inferred)}"
            )
        self.stdout.write(f"Recovery would append {len(plan.repairs)} events:")
        for repair in plan.repairs:
            self.stdout.write(f"  {repair.type} {json.dumps(repair.data)[:110]}")
        for turn in selectors.recovery_strategies(plan, session=session):
            # Worded as on the recovery page (sessions_app.log.strategy).
            self.stdout.write(self.style.WARNING(f"Strategy for {turn.label}: {turn.strategy}: {log_strategy.HEADLINES[turn.strategy]}"))
            self.stdout.write(f"  {log_strategy.ADVICE[turn.strategy]}")
            for c in turn.unverified:
                self.stdout.write(f"  verify in the outside system: {c.call.name or '?'} (call {c.call.id}, seq {c.call.sighted_seq}, {c.side_effect})")
            for c in turn.effects:
                if c.call.state == log_recovery.COMPLETED:
                    self.stdout.write(f"  done, never repeat: {c.call.name or '?'} (call {c.call.id}, seq {c.call.sighted_seq}, result at seq {c.call.result_seq})")
            for c in turn.settled:
                self.stdout.write(f"  {log_strategy.settled_words(c)}")

    def recover(
        self, *, project: Project | None, session_id: str, yes: bool, note: str, user: str, context: bool, abandon: bool, **_
    ):
        session = self.session(session_id, project)
        plan = selectors.recovery_plan(session)
        self.describe_plan(session, plan)
        if not plan.repairs:
            return
        person = self.operator(user, session)
        what = f"these {len(plan.repairs)} events" + (" and a recovery-context message" if context else "")
        if not yes and not self.confirmed(f"{'Abandon the turns: append' if abandon else 'Append'} {what} as {person.get_username()}? [y/N] "):
            raise CommandError("Not confirmed: nothing was appended.")
        try:
            result = services.recover(
                session_id=session.id, user=person, digest=plan.digest(session.event_count), note=note, context=context, abandon=abandon
            )
        except errors.StalePlan as stale:
            # As the recovery page says it: which events made the plan stale.
            first, last = session.event_count, stale.next_seq - 1
            if last < first:  # no event came: a verdict was recorded or withdrawn meanwhile
                raise CommandError(
                    "A call's verdict changed while you were reading the plan: nothing was appended."
                    " Run again with the same options to review the fresh plan."
                ) from None
            arrived = f"seq {first}" if first == last else f"seqs {first}-{last}"
            raise CommandError(
                f"{last - first + 1} event{'s' if last != first else ''} arrived while you were reading the plan ({arrived}):"
                " nothing was appended. Run again with the same options to review the fresh plan."
            ) from None
        self.stdout.write(
            self.style.SUCCESS(f"Recovered: appended {seq_range(result.appended[0].seq, result.appended[-1].seq, dash='-')}.")
        )

    def fork(self, *, project: Project | None, session_id: str, at: str, new_id: str | None, **_):
        self.session(session_id, project)
        boundary = at  # a name ("last") the fork rules judge, unless it is a number
        if re.fullmatch(r"-?[0-9]+", at):
            try:
                magnitude = decimal_int(at.removeprefix("-"), name="--at")
            except BadParameter as bad:
                raise CommandError(f"{bad}.") from None
            boundary = -magnitude if at.startswith("-") else magnitude
        if new_id is not None and not re.fullmatch(SESSION_ID_PATTERN, new_id):
            raise CommandError(f"--id {new_id!r}: {session_id_validator.message}.")
        try:
            child = services.fork(session_id=session_id, boundary=boundary, new_session_id=new_id)
        except log_fork.ForkRefused as refused:
            hint = ""
            if suggested := refused.fields.get("valid_boundaries"):
                options = [str(b) for b in (suggested["before"], suggested["after"]) if b is not None]
                hint = f" Allowed boundaries nearby: {', '.join(options)}." if options else ""
            raise CommandError(f"{refused.detail}.{hint}") from None
        self.stdout.write(
            self.style.SUCCESS(f"Forked {session_id} into {child.id}: {child.seed_length} events inherited.")
        )

    def delete(self, *, project: Project | None, session_id: str, yes: bool, **_):
        session = self.session(session_id, project)
        open_turns = " It has an open turn still unrecovered." if session.interrupted else ""
        question = f"Delete {session.id} ({session.event_count} events, project {session.project.slug}) for good?{open_turns} [y/N] "
        if not yes and not self.confirmed(question, "deleted"):
            raise CommandError("Not confirmed: nothing was deleted.")
        gone = retention.delete_session(session_id=session.id)
        others = sum(count for label, count in gone.rows.items() if label not in ("sessions_app.Event", "sessions_app.Session"))
        self.stdout.write(self.style.SUCCESS(f"Deleted {gone.session_id}: {gone.events} events and {others} other rows."))

    def retention(self, *, project: Project | None, sweep: bool, **_):
        projects = None if project is None else [project.pk]
        if project is not None and project.retention_days is None:
            self.stdout.write(f"Project {project.slug} keeps its sessions forever (no retention set).")
            return
        if sweep:
            swept = retention.sweep()
            for gone in swept.deleted:
                self.stdout.write(f"deleted {gone.session_id} ({gone.events} events)")
        for held in retention.held_sessions(projects=projects):
            self.stdout.write(f"kept {held.session_id} (retention counts from {format_time(held.retained_from)}): {held.why}")

    def confirmed(self, question: str, done: str = "appended") -> bool:
        """Ask on the terminal; without one (cron, CI, a closed stdin) refuse instead of crashing."""
        try:
            answer = input(question)
        except (EOFError, KeyboardInterrupt):
            self.stdout.write("")
            raise CommandError(f"Not confirmed: no answer on stdin (no terminal?); pass --yes to apply without asking. Nothing was {done}.") from None
        return answer.strip().lower() in {"y", "yes"}

    def verdict(
        self, *, project: Project | None, session_id: str, call_id: str, outcome: str | None, evidence: str | None,
        ref: str | None, withdraw: bool, reason: str | None, user: str, **_,
    ):  # fmt: skip
        session = self.session(session_id, project)
        actor = access.Actor(user=self.operator(user, session))
        if withdraw:
            verdicts.withdraw_verdict(actor=actor, session_id=session.id, call_id=call_id, reason=reason)
            self.stdout.write(self.style.SUCCESS(f"Withdrew the verdict on call {call_id}; it stays in the call's history."))
            return
        if outcome is None or evidence is None:
            raise CommandError("Pass --outcome and --evidence (or --withdraw). Nothing was recorded.")
        found = verdicts.record_verdict(actor=actor, session_id=session.id, call_id=call_id, outcome=outcome, evidence=evidence, external_ref=ref)
        self.stdout.write(self.style.SUCCESS(f"Call {call_id}: {log_strategy.verdict_label(found.outcome, found.by, found.evidence)}."))

    def operator(self, username: str, session):
        """Who confirms: an operator (or admin) of the session's project, or a superuser."""
        users = get_user_model().objects
        person = users.filter(username=username).first() if username else users.filter(is_superuser=True).order_by("pk").first()
        if person is None:
            raise CommandError(f"No user {username!r}; pass --user with an existing username." if username else "No superuser exists; pass --user.")
        actor = access.Actor(user=person)
        if not actor.can(session.project_id, access.RECOVER):
            held = actor.roles().get(session.project_id)
            raise CommandError(
                f"{person.get_username()} may not recover sessions of project {session.project.slug!r}: that needs the"
                f" {Role.OPERATOR} role (or {Role.ADMIN}); they are {'a ' + held if held else 'not a member'} there."
                " Nothing was changed."
            )
        return person
