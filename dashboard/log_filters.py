"""Logging filters (settings.LOGGING)."""

from __future__ import annotations

import logging
import re


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


# An invitation's set-password link carries its one-time token in the path (django.request logs a refused
# one's path, the access log every path): the token is masked wherever a log line names the path.
SECRET_IN_PATH = re.compile(r"(/account/set-password/[^/\s]+/)[^/\s]+")


def without_secrets(text: str) -> str:
    return SECRET_IN_PATH.sub(r"\1…", text) if "/set-password/" in text else text


class WithoutSecrets(logging.Filter):
    """A record whose message names a set-password link, with the link's token masked."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if (masked := without_secrets(message)) != message:
            record.msg, record.args = masked, None
        return True
