import os
import shutil

import pytest
from django.test import Client
from pytest_timeout import get_env_settings

from tests.access import token_for

# Per-test budgets of the slow suites, so a hang fails its run within minutes
# instead of eating CI's time; every other test gets pyproject's `timeout`. All of them, and the tests' own
# timeout marks, are stretched by load_factor when pytest-xdist's workers outnumber the cores.
SLOW_SUITE_BUDGETS = {
    "tests/e2e/": 180,  # a Chromium flow against a real Daphne (the slowest ~30 s on a busy machine)
    "tests/deploy/": 300,  # the scale-out launcher: migrate, collectstatic, 2 Daphne + worker + nginx, a browser (~60 s)
    "tests/dashboard/live/test_scaleout.py": 90,  # real Daphne, Redis outages, idle sockets (~20 s)
    "tests/dashboard/test_cli.py": 240,  # builds a wheel, installs it, runs `turnlog serve` (~25 s)
    "tests/sessions_app/api/test_schemas.py": 180,  # schemathesis, 25 examples per operation
    "tests/sessions_app/test_readback_properties.py": 240,  # hypothesis over every read path
}


def load_factor(config=None) -> float:
    """How many times slower a test may run here than alone: pytest-xdist's workers (`make test`) share the
    cores, so a busy test takes longer with more workers than cores. Never below 1. Test modules use it too,
    for their bounds on wall time (without pytest's config: the workers' count is in their environment).
    TEST_SUITES_AT_ONCE counts the suites sharing the machine (CI runs both backends' side by side)."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) * int(os.environ.get("TEST_SUITES_AT_ONCE", "1"))
    return max(1.0, workers / (len(os.sched_getaffinity(0)) or 1))


def pytest_collection_modifyitems(config, items):
    factor = load_factor(config)
    for item in items:
        marker = item.get_closest_marker("timeout")
        if marker is not None:
            budget = marker.kwargs.get("timeout", marker.args[0] if marker.args else None)
        else:
            budget = next((s for prefix, s in SLOW_SUITE_BUDGETS.items() if item.nodeid.startswith(prefix)), None)
            if budget is None and factor > 1:
                budget = get_env_settings(config).timeout  # --timeout, PYTEST_TIMEOUT or pyproject's
        if budget:
            # First among the item's markers: the one pytest-timeout reads (get_closest_marker).
            item.add_marker(pytest.mark.timeout(budget * factor), append=False)


@pytest.fixture(autouse=True)
def database_work_on_the_test_thread(settings):
    """In-process requests run their database work on the test's own thread and connection,
    so that they see what the test wrote in its transaction. The database threads themselves
    are tested in tests/sessions_app/lib/test_db_threads.py, and every Daphne the tests start uses them."""
    settings.TURNLOG_DB_THREADS = 0


@pytest.fixture(autouse=True)
def no_otlp_closer_thread(settings):
    """In-process tests close finished OTLP runs by calling services.close_settled_turns themselves:
    a closer thread would write outside the test's transaction. Every Daphne the tests start runs it."""
    settings.TURNLOG_OTLP_CLOSER = False


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker):
    """pytest-django's test databases, dropped at the end even on PostgreSQL.

    Threads the tests started (the database threads keep theirs by design, a test's
    concurrent writers) leave connections open, and PostgreSQL refuses to drop a
    database in use: the run ended with a warning and left the database behind."""
    yield
    from django.db import connection

    if connection.vendor == "postgresql":
        with django_db_blocker.unblock(), connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )


def running_in_ci() -> bool:
    return os.environ.get("CI", "").lower() in {"1", "true", "yes"}


class ApiClient:
    """A Django test client that sends a bearer token and JSON bodies."""

    def __init__(self, token: str | None):
        self.client = Client()
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}

    def get(self, path, params=None, **headers):
        return self.client.get(path, params or {}, headers={**self.headers, **headers})

    def post(self, path, body=None, **headers):
        return self.client.post(path, body if body is not None else {}, content_type="application/json", headers={**self.headers, **headers})

    def patch(self, path, body=None, **headers):
        return self.client.patch(path, body if body is not None else {}, content_type="application/json", headers={**self.headers, **headers})

    def delete(self, path, **headers):
        return self.client.delete(path, headers={**self.headers, **headers})

    def post_raw(self, path, raw: bytes, **headers):
        return self.client.generic("POST", path, raw, content_type="application/json", headers={**self.headers, **headers})


@pytest.fixture
def agent_user(django_user_model):
    return django_user_model.objects.create_user("agent")


@pytest.fixture
def api(agent_user):
    """A member of the default project: reads, creates, appends and forks there."""
    return ApiClient(token_for(agent_user))


def find_chromium() -> str:
    """Debian's Chromium; in CI its absence is a failure, never a skip."""
    path = shutil.which("chromium") or ("/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None)
    if path is None:
        if running_in_ci():
            pytest.fail("Chromium is not installed; CI must install it (apt-get install chromium)")
        pytest.skip("Chromium is not installed (apt-get install chromium)")
    return path
