"""Writes: every change to the stored logs goes through these functions.

Each runs in one transaction and publishes what it stored only after that
transaction commits (session-log.md section 7; publishing.py). Callers use
the names below; the modules of this package hold them by concern.
"""

from sessions_app.services.search import index_pending

from .access_admin import InvalidScopes, LastAdmin, issue_token, revoke_token, set_membership
from .appends import AppendResult, append_events, create_session
from .audit_log import audit
from .event_rows import AGENT_NAME_MAX
from .forks import fork
from .notes import UNCHANGED, add_note, delete_note, edit_note
from .otlp import IngestResult, SpanRefusal, close_settled_turns, ingest_spans, release_held_spans, sessions_to_settle
from .publishing import CREDENTIALS_GROUP, SESSIONS_GROUP, session_group
from .recovery import RepairResult, patch_dangling_calls, recover, recover_automatically
from .transfer import import_blob

__all__ = [
    "AGENT_NAME_MAX",
    "CREDENTIALS_GROUP",
    "SESSIONS_GROUP",
    "UNCHANGED",
    "AppendResult",
    "IngestResult",
    "InvalidScopes",
    "LastAdmin",
    "RepairResult",
    "SpanRefusal",
    "add_note",
    "append_events",
    "audit",
    "close_settled_turns",
    "create_session",
    "delete_note",
    "edit_note",
    "fork",
    "import_blob",
    "index_pending",
    "ingest_spans",
    "issue_token",
    "patch_dangling_calls",
    "recover",
    "recover_automatically",
    "revoke_token",
    "session_group",
    "release_held_spans",
    "sessions_to_settle",
    "set_membership",
]
