"""A live Daphne for the OTLP tests that export over HTTP, and a member's token for it."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.db import connection

from tests.access import token_for
from tests.servers import DaphneServer

# A short settle time, so finished runs close within a test; a short stall time, so crashed runs stall.
SETTLE = 1.0
STALL = 3


@pytest.fixture
def server(transactional_db, tmp_path):
    daphne = DaphneServer(
        connection.settings_dict, tmp_path / "daphne.log",
        TURNLOG_OTLP_SETTLE_SECONDS=str(SETTLE), TURNLOG_STALL_SECONDS=str(STALL),
    )  # fmt: skip
    try:
        yield daphne.start()
    finally:
        daphne.stop()


@pytest.fixture
def token():
    return token_for(get_user_model().objects.create_user("support-agent"))


