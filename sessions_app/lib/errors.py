"""Domain errors of the services and selectors; the API maps each to its code."""

from sessions_app.log import recovery as log_recovery


class SessionNotFound(Exception):
    def __init__(self, session_id: str):
        super().__init__(f"session {session_id!r} does not exist")
        self.session_id = session_id


class NotGranted(Exception):
    """The API token may not do this with the session, or one of them does not exist: the API says which."""

    def __init__(self, session_id: str):
        super().__init__(f"the token may not do this with session {session_id!r}")
        self.session_id = session_id


class SessionExists(Exception):
    def __init__(self, session_id: str):
        super().__init__(f"session {session_id!r} already exists")
        self.session_id = session_id


class SeqConflict(Exception):
    def __init__(self, expected_seq: int, next_seq: int):
        super().__init__(f"expected_seq is {expected_seq} but the session's next seq is {next_seq}")
        self.next_seq = next_seq


class IdempotencyKeyReused(Exception):
    def __init__(self, key: str):
        super().__init__(f"Idempotency-Key {key!r} was already used on this session with a different body")


class StalePlan(Exception):
    """The previewed digest no longer matches: nothing was appended; here is the fresh plan."""

    def __init__(self, plan: log_recovery.Plan, session):
        super().__init__("the log, or a verdict on one of its calls, changed since this plan was previewed; review the fresh plan")
        self.plan, self.session, self.next_seq = plan, session, session.event_count


class RecoveryFirst(Exception):
    def __init__(self, open_turns: list[int]):
        super().__init__(
            f"the session has open turns (seqs {open_turns}); recover it first, or the generic"
            " patch would erase the risk classification of the owed calls"
        )


class NoteNotFound(Exception):
    def __init__(self, note_id: int):
        super().__init__(f"note {note_id} does not exist")
        self.note_id = note_id


class InvalidNote(Exception):
    """A note's text, tags or seq breaks the notes' rules (docs/api.md, Notes): which field, and why."""

    def __init__(self, field: str, reason: str, detail: str):
        super().__init__(detail)
        self.field, self.reason, self.detail = field, reason, detail


class SessionHasForks(Exception):
    """A session with forks is kept (docs/session-log.md, Retention): its forks' inherited search hits and calls
    are answered from its rows."""

    def __init__(self, session_id: str, fork_ids: list[str]):
        shown = ", ".join(fork_ids[:5]) + (f" and {len(fork_ids) - 5} more" if len(fork_ids) > 5 else "")
        super().__init__(f"session {session_id!r} has forks ({shown}): it is kept until they are deleted")
        self.session_id, self.fork_ids = session_id, fork_ids


class SessionNotExpired(Exception):
    """The retention sweep found the session blocked (an unrecovered open turn) or active again under its lock."""

    def __init__(self, session_id: str, why: str):
        super().__init__(f"session {session_id!r} is kept: {why}")
        self.session_id, self.why = session_id, why


class CallNotFound(Exception):
    def __init__(self, session_id: str, call_id: str):
        super().__init__(f"session {session_id!r} has no tool call with id {call_id!r}")
        self.session_id, self.call_id = session_id, call_id


class VerdictNotFound(Exception):
    def __init__(self, session_id: str, call_id: str):
        super().__init__(f"call {call_id!r} of session {session_id!r} has no current verdict")
        self.session_id, self.call_id = session_id, call_id


class NoReconciler(Exception):
    """A check asked for a call whose tool's policy names no check_url (nothing to ask)."""

    def __init__(self, session_id: str, call_id: str, tool: str | None):
        what = f"tool {tool!r}" if tool else "a call that names no tool"
        super().__init__(f"no reconciler: no tool policy with a check_url matches {what} (call {call_id!r} of session {session_id!r})")
        self.session_id, self.call_id, self.tool = session_id, call_id, tool


class InvalidVerdict(Exception):
    """A verdict's outcome, evidence or reference breaks the rules of docs/api.md (Verdicts): which field, and why."""

    def __init__(self, field: str, reason: str, detail: str):
        super().__init__(detail)
        self.field, self.reason, self.detail = field, reason, detail


class PolicyNotFound(Exception):
    def __init__(self, project_slug: str | None, pattern: str):
        where = f"project {project_slug!r}" if project_slug is not None else "the site"
        super().__init__(f"{where} has no tool policy with pattern {pattern!r}")
        self.project_slug, self.pattern = project_slug, pattern


class InvalidPolicy(Exception):
    """A tool policy's pattern, class, receipt pointer or reconciler address breaks the rules of docs/api.md
    (Verdicts, receipts and reconcilers): which field, and why."""

    def __init__(self, field: str, reason: str, detail: str):
        super().__init__(detail)
        self.field, self.reason, self.detail = field, reason, detail


class InvalidPrice(Exception):
    """A project price's model, provider, hour or rate breaks the rules of docs/api.md (Prices): which field, and why."""

    def __init__(self, field: str, reason: str, detail: str):
        super().__init__(detail)
        self.field, self.reason, self.detail = field, reason, detail


class PriceNotFound(Exception):
    def __init__(self, project_slug: str, model: str, provider: str, valid_from):
        by = f" of provider {provider!r}" if provider else " (any provider)"
        super().__init__(f"project {project_slug!r} has no price of model {model!r}{by} valid from {valid_from:%Y-%m-%d %H:00} UTC")
        self.project_slug, self.model, self.provider, self.valid_from = project_slug, model, provider, valid_from
