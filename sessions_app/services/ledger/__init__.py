"""The call ledger (writes): one row per sighted call, kept current in the append and recovery transactions.

`track_events` from services.event_rows.store_events, `track_patch` where a dangling-call patch
is recorded, `rebuild` for logs stored before the ledger (manage.py ledger_rebuild).
"""

from sessions_app.services.ledger.tracking import rebuild, rebuild_session, track_events, track_patch

__all__ = ["rebuild", "rebuild_session", "track_events", "track_patch"]
