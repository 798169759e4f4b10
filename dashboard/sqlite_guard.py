"""Only the commands that make a database create a SQLite file: `migrate` (so `make run` and `turnlog serve`,
which migrate first) and `restore`, whose target may be new; `test` makes databases of its own. Any other command
run against a missing file stops, naming it, instead of creating an empty database and failing on "no such table"
(or, with the wrong TURNLOG_DATA_DIR or DATABASE_URL, writing somewhere nobody reads). Installed by `turnlog` and
`manage.py` before Django opens a connection; the tests never go through them."""

from __future__ import annotations

import sys
from pathlib import Path

CREATING = frozenset({"migrate", "restore", "test"})


def sqlite_file() -> Path | None:
    """The SQLite file the settings name, or None (PostgreSQL, an in-memory database)."""
    from django.conf import settings

    database = settings.DATABASES["default"]
    name = str(database.get("NAME") or "")
    if database["ENGINE"] != "django.db.backends.sqlite3" or not name or name == ":memory:" or name.startswith("file:"):
        return None
    return Path(name).resolve()


def missing(path: Path) -> str:
    return (
        f"the SQLite database {path} does not exist, and this command does not create one: create it with"
        " `turnlog manage migrate` (or `manage.py migrate`, `turnlog serve`, `make run`), or point DATABASE_URL"
        " or TURNLOG_DATA_DIR at the database you meant"
    )


def exit_if_missing() -> None:
    """For the long-running processes (`turnlog daphne`, the worker), which would otherwise start and fail on
    each request or round: exit 1 now when the SQLite file is missing."""
    path = sqlite_file()
    if path is not None and not path.exists():
        sys.exit(f"turnlog: {missing(path)}")


def warn_if_missing() -> None:
    """For a server (`turnlog daphne`): say so now when the SQLite file is missing. It stays up, alive but
    unavailable (/readyz: database unreachable), as with any database it cannot reach, and creates nothing."""
    path = sqlite_file()
    if path is not None and not path.exists():
        print(f"turnlog: {missing(path)}", file=sys.stderr, flush=True)


def refuse_to_create(command: str) -> None:
    """Unless `command` is one that creates the database: make opening a connection to a missing SQLite file a
    CommandError naming it (printed, exit 1) instead of sqlite3's silent creation of an empty file; for the
    server, the database error a database it cannot reach gives (its /readyz reports it)."""
    if command in CREATING:
        return
    import sqlite3

    from django.core.management.base import CommandError
    from django.db.backends.sqlite3 import base

    refusal = sqlite3.OperationalError if command == "daphne" else CommandError

    original = base.DatabaseWrapper.get_new_connection
    if getattr(original, "refuses_to_create", False):
        return

    def get_new_connection(self, conn_params):
        name = conn_params.get("database")
        if isinstance(name, str | Path) and str(name) not in ("", ":memory:") and not str(name).startswith("file:") and not Path(name).exists():
            raise refusal(missing(Path(name).resolve()))
        return original(self, conn_params)

    get_new_connection.refuses_to_create = True
    base.DatabaseWrapper.get_new_connection = get_new_connection
