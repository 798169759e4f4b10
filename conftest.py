"""What each pytest-xdist worker (`make test` runs several) keeps to itself besides its test database,
and the migrated state every test starts from whatever ran before it in its worker.

pytest-django already gives each worker its own test database (the name gets a _gw0, _gw1, ... suffix,
on SQLite and on PostgreSQL), and the Daphnes the tests start are told that database (tests/servers.py).
The Redis that REDIS_URL names is shared, though, and the channel layer's groups are named after session
ids and projects that every worker's database holds alike: each worker gets a Redis database of its own,
REDIS_URL's number plus the worker's, in this process and in every server it starts (they inherit it).

A test on `transactional_db` ends with Django's flush, which empties the models' tables and nothing else.
Run alone, pytest-django orders every such test after all the others; a worker runs whole files as they
come, so a test on `db` may follow a flush in its worker, and must still find what the migrations made:
after each flush the migrations' rows go back (the default project) and the tables without a model (the
search index) are emptied.

Lives at the root so that it also covers turnlog_client/tests.
"""

from __future__ import annotations

import os
from collections import Counter
from urllib.parse import urlsplit, urlunsplit

import pytest
from django.db.models.signals import post_migrate

# The tests never read an operator's configuration file (/etc/turnlog.env, or one TURNLOG_CONFIG names), nor do the
# `turnlog` and `manage.py` processes they start: empty, it names no file. A test that wants one sets it for its process.
os.environ["TURNLOG_CONFIG"] = ""

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


# The search index's tables (sessions_app/migrations/0012_search.py), by vendor: no model, so flush leaves them.
# Contentless FTS5 tables refuse a DELETE; they are emptied with FTS5's delete-all.
TABLES_WITHOUT_A_MODEL = {
    "sqlite": [
        "INSERT INTO sessions_app_search_words (sessions_app_search_words) VALUES ('delete-all')",
        "INSERT INTO sessions_app_search_short (sessions_app_search_short) VALUES ('delete-all')",
        "DELETE FROM sessions_app_search_notes",
    ],
    "postgresql": ["TRUNCATE sessions_app_search_event, sessions_app_search_note"],
}


def as_migrated_after_a_flush(sender, using, **kwargs) -> None:
    """After flush, what the migrations left in the tables flush emptied or never saw (see the module)."""
    if "plan" in kwargs:  # migrate sends its plan; flush sends none
        return
    from django.db import connections

    from sessions_app.models import Project

    connection = connections[using]
    with connection.cursor() as cursor:
        for statement in TABLES_WITHOUT_A_MODEL[connection.vendor]:
            cursor.execute(statement)
    # As sessions_app/migrations/0004_projects_tokens_audit.py makes it.
    Project.objects.using(using).get_or_create(slug=Project.DEFAULT_SLUG, defaults={"name": "Default"})


def pytest_configure(config: pytest.Config) -> None:
    from django.apps import apps

    post_migrate.connect(as_migrated_after_a_flush, sender=apps.get_app_config("sessions_app"), dispatch_uid="as_migrated_after_a_flush")
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


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """One node id per test. pytest-xdist's --dist loadfile tracks tests by node id: of tests that share one,
    it runs the first alone. Schemathesis's tests (one per API operation, tests/sessions_app/api/test_schemas.py)
    all carry their function's id under pytest 9.2, though each is named after its operation: that name becomes
    its id."""
    shared = Counter(item.nodeid for item in items)
    for item in items:
        if shared[item.nodeid] > 1 and item.name != item.nodeid.rsplit("::", 1)[-1]:
            item._id = item.parent.id.child(item.name)
    if len(ids := Counter(item.nodeid for item in items)) != len(items):
        raise pytest.UsageError(f"tests sharing a node id, of which pytest-xdist runs one: {[i for i, n in ids.items() if n > 1]}")
