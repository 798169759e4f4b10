"""The deployment's tests drive a browser as tests/e2e does: its fixtures, and its rule that this process writes without publishing."""

from tests.e2e.conftest import browser, chromium_path, no_publishing_from_this_process, plain_user  # noqa: F401
