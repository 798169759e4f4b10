"""Retention: deleting whole sessions, by hand or past their project's retention (the worker's sweep).

delete_session is the only deletion of events; the sweep and the doors (`manage.py sessions delete`,
the session page's delete action) all go through it.
"""

from .deletion import RETENTION, DeletedSession, delete_session
from .policy import RETENTION_DAYS_MAX, set_retention
from .sweep import Swept, held_sessions, sweep

__all__ = ["RETENTION", "RETENTION_DAYS_MAX", "DeletedSession", "Swept", "delete_session", "held_sessions", "set_retention", "sweep"]
