import pytest

from tests.webhook_receiver import receiver  # noqa: F401  (the fixture)


@pytest.fixture(autouse=True)
def webhooks_to_local_receivers(settings):
    """The receivers run on 127.0.0.1: allowed here (test_addresses turns it off), and retries come quickly."""
    settings.TURNLOG_WEBHOOK_ALLOW_PRIVATE = True
    settings.TURNLOG_WEBHOOK_RETRY_SECONDS = 0.01
    settings.TURNLOG_WEBHOOK_TIMEOUT_SECONDS = 5
    settings.TURNLOG_BASE_URL = "https://turnlog.example.org"
