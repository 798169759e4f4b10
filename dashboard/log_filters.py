"""Logging filters (settings.LOGGING)."""

from __future__ import annotations

import logging


class WithoutTraceback(logging.Filter):
    """A record logged as one line, its traceback dropped.

    For django.security.DisallowedHost: a request naming a host outside
    ALLOWED_HOSTS is a client's error, not the server's, and Django logged
    it with a full traceback that repeated the header; its message says
    everything (the header, and the setting to change).
    """

    def filter(self, record: logging.LogRecord) -> bool:
        record.exc_info = record.exc_text = record.stack_info = None
        return True
