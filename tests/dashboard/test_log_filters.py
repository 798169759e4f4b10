"""Logging filters (dashboard/log_filters.py): a set-password link's token never reaches a log line."""

from __future__ import annotations

import logging

from dashboard.log_filters import WithoutSecrets, without_secrets


def test_a_set_password_links_token_is_masked():
    assert without_secrets("/account/set-password/MQ/c7k-0a1b2c3d/") == "/account/set-password/MQ/…/"
    assert without_secrets("/sessions/abc/") == "/sessions/abc/"


def test_a_record_naming_a_link_is_masked_as_django_logs_it():
    made = logging.LogRecord("django.request", logging.WARNING, __file__, 1, "%s: %s", ("Gone", "/account/set-password/MQ/secret-part/"), None)
    assert WithoutSecrets().filter(made)
    assert made.getMessage() == "Gone: /account/set-password/MQ/…/"
