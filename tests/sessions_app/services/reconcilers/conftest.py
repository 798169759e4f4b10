"""The reconciler tests' endpoint (tests/reconciler_endpoint.py), allowed on 127.0.0.1, with short timeouts."""

import pytest

from sessions_app import worker
from tests.reconciler_endpoint import endpoint  # noqa: F401  (the fixture)


@pytest.fixture(autouse=True)
def checks_to_local_endpoints(settings):
    """The endpoint runs on 127.0.0.1: allowed here (the refusal test turns it off); short timeouts."""
    settings.TURNLOG_WEBHOOK_ALLOW_PRIVATE = True
    settings.TURNLOG_RECONCILER_TIMEOUT_SECONDS = 5
    yield
    worker.finish_checks()  # no ask outlives its test


