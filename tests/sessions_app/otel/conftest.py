"""A live Daphne for the OTLP tests that export over HTTP, a member's token for it, and Google ADK's virtualenv."""

from __future__ import annotations

from pathlib import Path

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




# google-adk caps OpenTelemetry below the suite's: its runs use a virtualenv of their own, which
# `make test` makes first (the Makefile's .venv-adk/.installed, tests/sessions_app/otel/adk-requirements.txt).
ADK_VENV = Path(__file__).resolve().parents[3] / ".venv-adk"


@pytest.fixture(scope="session")
def adk_python() -> Path:
    python = ADK_VENV / "bin" / "python"
    if not (python.exists() and (ADK_VENV / ".installed").exists()):
        pytest.fail(f"Google ADK's virtualenv {ADK_VENV} is missing or half made: "
                    "`make .venv-adk/.installed` makes it (`make test` does first)", pytrace=False)
    return python
