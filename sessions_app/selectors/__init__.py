"""Reads: the queries views, the API and consumers use.

Callers go through this package (`selectors.list_sessions(...)`); the
submodules group the reads by concern and import each other directly.
"""

from sessions_app.lib.cursors import InvalidCursor  # callers catch selectors.InvalidCursor
from sessions_app.selectors.agents import (
    AgentSummary,
    AgentWindow,
    agent_crashes,
    agent_exists,
    agent_stalled_sessions,
    agent_summaries,
    agent_usage,
)
from sessions_app.selectors.audit import audit_entries, audit_targets
from sessions_app.selectors.calls import CHECKED_CLASSES, CallRow, patch_seqs, session_calls
from sessions_app.selectors.changes import annotated_seqs_since, changed_since, sessions_active_since, sessions_annotated_since, sessions_deleted_since
from sessions_app.selectors.compare import SessionComparison, compare_sessions
from sessions_app.selectors.events import (
    call_lookups,
    events_since,
    placed_log_events,
    session_log,
    session_messages,
    steps_open_at,
    wire_events_since,
)
from sessions_app.selectors.fleet_calls import CLASSES, FleetPage, fleet_calls
from sessions_app.selectors.forks import fork_point, forks_of, lineage, open_turn_starts_before, unused_fork_id
from sessions_app.selectors.ledger import (
    STATES_TO_CHECK,
    LedgerWindow,
    SessionLedger,
    answer_seqs,
    call_rows,
    ledger_window,
    session_ledger,
)
from sessions_app.selectors.notes import get_note, notes_by_seq, session_notes
from sessions_app.selectors.notify import delivery_history, project_webhook, project_webhooks
from sessions_app.selectors.projects import (
    project_member,
    project_members,
    project_token,
    project_tokens,
    session_counts,
    user_named,
    user_named_alike,
    user_token,
    user_tokens,
)
from sessions_app.selectors.reconcilers import CallChecks, SessionChecks, call_checks, policy_attempts, project_attempts, session_checks
from sessions_app.selectors.recovery import (
    complete_tail,
    dangling_patch,
    recovery_history,
    receipt_pointers,
    recovery_plan,
    recovery_strategies,
    side_effect_classes,
)
from sessions_app.selectors.sessions import (
    ACTIVE,
    CLEAN,
    RECOVERED,
    RUNNING,
    STALLED,
    SORT_CHOICES,
    STATUSES,
    SessionFilter,
    event_counts,
    get_session,
    label_open_turns,
    list_sessions,
    session_for_page,
    session_with_forks_made,
    sessions_by_status,
    status_filter,
)
from sessions_app.selectors.transcript import (
    Placement,
    block_start_columns,
    block_starts_in,
    card_seq,
    compactions,
    enclosing_turns,
    events_at,
    events_of_blocks_touched,
    last_event_of_turn,
    last_seq_of_turn,
    latest_block_starts,
    owed_calls,
    placed_events_at,
    placed_events_from,
    placed_events_in,
    step_ends,
    steps_closed_by,
    steps_in_turn,
    stored_columns,
    turn_last_seqs,
    turn_start_data,
    turn_starts_at,
    turns_closed_at,
    turns_closed_by,
    turns_of,
)
from sessions_app.selectors.verdicts import (
    check_attempts,
    current_verdict,
    current_verdicts,
    current_verdicts_of,
    mark_unknown_settled,
    unknown_calls_settled,
    verdict_history,
    verdicts_of_calls,
)
