"""What each pytest-xdist worker (`make test` runs several) keeps to itself besides its test database.

pytest-django already gives each worker its own test database (the name gets a _gw0, _gw1, ... suffix,
on SQLite and on PostgreSQL), and the Daphnes the tests start are told that database (tests/servers.py).
The Redis that REDIS_URL names is shared, though, and the channel layer's groups are named after session
ids and projects that every worker's database holds alike: each worker gets a Redis database of its own,
REDIS_URL's number plus the worker's, in this process and in every server it starts (they inherit it).
Lives at the root so that it also covers turnlog_client/tests.
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit, urlunsplit

import pytest

# Redis's default `databases` setting: numbers 0-15.
REDIS_DATABASES = 16


def worker_number(config: pytest.Config) -> int | None:
    """This process's xdist worker number (gw3 -> 3), or None when it runs the tests alone."""
    worker = getattr(config, "workerinput", {}).get("workerid")
    return int(worker.removeprefix("gw")) if worker else None


def redis_url_of_worker(url: str, worker: int) -> str:
    """The URL of the Redis database `worker` uses: the number `url` names (0 when none) plus the worker's."""
    parts = urlsplit(url)
    path = parts.path.strip("/")
    if path and not path.isdigit():
        raise pytest.UsageError(f"REDIS_URL must name its database as a number (redis://host:port/0), not {path!r}")
    database = int(path or 0) + worker
    if database >= REDIS_DATABASES:
        raise pytest.UsageError(
            f"REDIS_URL names database {int(path or 0)}, and worker gw{worker} would use database {database}: "
            f"Redis has {REDIS_DATABASES} (0-{REDIS_DATABASES - 1}); name a lower one or run fewer workers (-n)"
        )
    return urlunsplit(parts._replace(path=f"/{database}"))


def pytest_configure(config: pytest.Config) -> None:
    redis_url = os.environ.get("REDIS_URL", "")
    if not redis_url:
        return
    worker = worker_number(config)
    if worker is None:
        # The controller (or a run without workers): refuse a REDIS_URL its last worker could not use here,
        # with the reason, rather than in every worker as it starts (xdist would restart them, in vain).
        workers = len(getattr(config.option, "tx", None) or []) if getattr(config.option, "dist", "no") != "no" else 0
        if workers:
            redis_url_of_worker(redis_url, workers - 1)
        return
    from django.conf import settings

    from dashboard.settings import redis_channel_layer

    # Before any test module is imported (some read settings.REDIS_URL then) and before any layer is built.
    os.environ["REDIS_URL"] = settings.REDIS_URL = redis_url_of_worker(redis_url, worker)
    settings.CHANNEL_LAYERS = {"default": redis_channel_layer(settings.REDIS_URL)}
