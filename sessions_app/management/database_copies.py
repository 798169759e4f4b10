"""Backups of the database Turnlog uses and their restores (`manage.py backup` and `restore`; docs/guide/deploy.md,
"Backup and restore"): SQLite's online backup API, PostgreSQL's pg_dump (custom format) and pg_restore.

A backup file is private from its first byte (mkstemp creates it 0600 beside its final name) and takes its
name only when complete, so a failed backup leaves no partial file and an earlier backup stays whole. A restore
checks the backup and the target first and writes nothing into a target that holds anything."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import tempfile
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.core.management.base import CommandError

SQLITE_HEADER = b"SQLite format 3\x00"
PG_CUSTOM_HEADER = b"PGDMP"  # pg_dump --format=custom
# libpq's connection keywords that a DATABASE_URL's query may carry (in Django's OPTIONS), by their variables.
LIBPQ_VARIABLES = {
    "sslmode": "PGSSLMODE", "sslrootcert": "PGSSLROOTCERT", "sslcert": "PGSSLCERT", "sslkey": "PGSSLKEY",
    "sslcrl": "PGSSLCRL", "connect_timeout": "PGCONNECT_TIMEOUT", "application_name": "PGAPPNAME",
    "options": "PGOPTIONS", "passfile": "PGPASSFILE", "target_session_attrs": "PGTARGETSESSIONATTRS",
}  # fmt: skip


@dataclass(frozen=True)
class Database:
    """The database the settings name (DATABASE_URL, else the SQLite file under TURNLOG_DATA_DIR)."""

    vendor: str  # "sqlite" or "postgresql"
    name: str  # the SQLite file's path, or the PostgreSQL database's name
    settings: dict

    @classmethod
    def current(cls) -> Database:
        database = settings.DATABASES["default"]
        engine = database["ENGINE"]
        if engine == "django.db.backends.sqlite3":
            return cls("sqlite", str(Path(database["NAME"]).resolve()), database)
        if engine == "django.db.backends.postgresql":
            return cls("postgresql", database["NAME"], database)
        raise CommandError(f"backups know SQLite and PostgreSQL, not the database engine {engine!r} (DATABASE_URL)")

    def __str__(self) -> str:
        """How the commands name it: never with its password."""
        if self.vendor == "sqlite":
            return f"the SQLite database {self.name}"
        host = self.settings.get("HOST") or "the local socket"
        where = f"{host}:{self.settings['PORT']}" if self.settings.get("PORT") else host
        user = f", user {self.settings['USER']}" if self.settings.get("USER") else ""
        return f"the PostgreSQL database {self.name} on {where}{user}"

    def libpq_environment(self) -> dict[str, str]:
        """The process environment with this database's connection in libpq's variables, so that pg_dump and
        pg_restore connect as Django does and no password appears on a command line."""
        env = dict(os.environ)
        for key, variable in [("HOST", "PGHOST"), ("PORT", "PGPORT"), ("USER", "PGUSER"), ("PASSWORD", "PGPASSWORD")]:
            if self.settings.get(key):
                env[variable] = str(self.settings[key])
        for key, variable in LIBPQ_VARIABLES.items():
            if self.settings.get("OPTIONS", {}).get(key) is not None:
                env[variable] = str(self.settings["OPTIONS"][key])
        return env

    def connect(self):
        """A connection of its own (psycopg's, in autocommit), not the pool's: a missing database is told at once."""
        import psycopg

        keys = {"NAME": "dbname", "HOST": "host", "PORT": "port", "USER": "user", "PASSWORD": "password"}
        params = {keyword: str(self.settings[key]) for key, keyword in keys.items() if self.settings.get(key)}
        params |= {key: str(value) for key, value in self.settings.get("OPTIONS", {}).items() if key in LIBPQ_VARIABLES}
        try:
            return psycopg.connect(**params, autocommit=True)
        except psycopg.OperationalError as error:
            raise CommandError(f"cannot connect to {self}: {str(error).strip()}") from None


def backup(database: Database, path: Path, *, force: bool) -> None:
    """Write a backup of `database` to `path` (refused if it exists, unless `force`)."""
    if not path.parent.is_dir():
        raise CommandError(f"cannot back up to {path}: the directory {path.parent} does not exist")
    if path.exists() and not force:
        raise CommandError(f"{path} exists: not overwritten (pass --force to replace it)")
    if database.vendor == "sqlite" and not Path(database.name).is_file():
        raise CommandError(f"no SQLite database at {database.name}: nothing to back up (is DATABASE_URL or TURNLOG_DATA_DIR set as the server's?)")
    descriptor, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".partial")  # mode 0600
    temporary = Path(name)
    try:
        if database.vendor == "sqlite":
            os.close(descriptor)
            sqlite_backup(Path(database.name), temporary)
        else:
            with os.fdopen(descriptor, "wb") as out:
                run(database, ["pg_dump", "--format=custom", f"--dbname={database.name}"], stdout=out, failing=f"backing up {database}")
        with temporary.open("rb") as written:
            os.fsync(written.fileno())
        put_in_place(temporary, path, force=force)
    finally:
        temporary.unlink(missing_ok=True)


def sqlite_backup(source: Path, destination: Path) -> None:
    # mode=rw: never create a missing file. The backup copies every page in one step, under one read
    # transaction: a consistent snapshot, while WAL lets the server keep committing.
    with closing(sqlite3.connect(f"{source.as_uri()}?mode=rw", uri=True, timeout=20)) as src:
        with closing(sqlite3.connect(destination)) as dst:
            src.backup(dst)
            # One self-contained file (the source's WAL mode would want a -wal file beside it).
            dst.execute("PRAGMA journal_mode=DELETE")
            check_sqlite(dst, destination)


def put_in_place(temporary: Path, path: Path, *, force: bool) -> None:
    if force:
        os.replace(temporary, path)
        return
    try:
        os.link(temporary, path)  # fails if `path` appeared meanwhile: never overwritten
    except FileExistsError:
        raise CommandError(f"{path} exists: not overwritten (pass --force to replace it)") from None


def restore(database: Database, path: Path) -> None:
    """Restore the backup at `path` into `database`, which must hold nothing (refused otherwise, untouched)."""
    if not path.is_file():
        raise CommandError(f"no backup at {path}")
    with path.open("rb") as file:
        header = file.read(len(SQLITE_HEADER))
    kind = "sqlite" if header == SQLITE_HEADER else "postgresql" if header.startswith(PG_CUSTOM_HEADER) else None
    if kind is None:
        raise CommandError(f"{path} is not a Turnlog backup (neither a SQLite database nor a pg_dump custom-format archive)")
    if kind != database.vendor:
        made_by = "SQLite" if kind == "sqlite" else "PostgreSQL (pg_dump)"
        raise CommandError(f"{path} is a {made_by} backup and this Turnlog uses {database}: restore it with the settings it was made with")
    if database.vendor == "sqlite":
        sqlite_restore(path, Path(database.name), database)
    else:
        postgresql_restore(path, database)


def sqlite_restore(path: Path, target: Path, database: Database) -> None:
    with closing(sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)) as src:
        try:
            check_sqlite(src, path)
            turnlog = src.execute("SELECT 1 FROM django_migrations WHERE app = 'sessions_app' LIMIT 1").fetchone()
        except sqlite3.DatabaseError as error:
            raise CommandError(f"{path} is not a Turnlog backup: {error}") from None
        if not turnlog:
            raise CommandError(f"{path} is not a Turnlog backup: it has no Turnlog migrations")
        if not target.parent.is_dir():
            raise CommandError(f"cannot restore into {database}: the directory {target.parent} does not exist")
        for leftover in (Path(f"{target}-wal"), Path(f"{target}-journal")):
            if leftover.exists() and not target.exists():
                raise CommandError(f"{leftover} is left from an earlier database: move it aside with that database, then restore")
        if target.exists():
            with closing(sqlite3.connect(f"{target.as_uri()}?mode=rw", uri=True, timeout=20)) as existing:
                refuse_unless_empty(database, sqlite_tables_with_rows(existing))
        else:
            os.close(os.open(target, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))  # private, as the server's own file
        with closing(sqlite3.connect(target, timeout=20)) as dst:
            src.backup(dst)


def sqlite_tables_with_rows(connection: sqlite3.Connection) -> list[str]:
    # A virtual table (the search index's FTS5) may refuse a scan; its rows are in its shadow tables, read here.
    tables = [
        name
        for (name,) in connection.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            " AND sql NOT LIKE 'CREATE VIRTUAL TABLE%' ORDER BY name"
        )
    ]
    return [table for table in tables if connection.execute(f'SELECT 1 FROM "{table}" LIMIT 1').fetchone()]


def check_sqlite(connection: sqlite3.Connection, path: Path) -> None:
    (verdict,) = connection.execute("PRAGMA quick_check").fetchone()
    if verdict != "ok":
        raise CommandError(f"{path} is damaged (SQLite's quick_check: {verdict})")


def postgresql_restore(path: Path, database: Database) -> None:
    listing = run(database, ["pg_restore", "--list", str(path)], stdout=subprocess.PIPE, failing=f"reading {path}")
    if b" TABLE public django_migrations " not in listing:
        raise CommandError(f"{path} is not a Turnlog backup: it has no django_migrations table")
    with database.connect() as connection:
        refuse_unless_empty(database, postgresql_tables(connection))
    # One transaction, stopped at the first error: a failed restore leaves the database as empty as it was.
    # The restoring user (DATABASE_URL's) owns what it creates, whoever owned it before.
    command = ["pg_restore", "--single-transaction", "--exit-on-error", "--no-owner", "--no-privileges", "--no-comments"]
    run(database, [*command, f"--dbname={database.name}", str(path)], stdout=subprocess.DEVNULL, failing=f"restoring {path} into {database}")
    with database.connect() as connection:
        connection.execute("ANALYZE")  # pg_restore brings no planner statistics


def postgresql_tables(connection) -> list[str]:
    """Every table, view and sequence of the database outside PostgreSQL's own schemas and extensions."""
    return [
        row[0]
        for row in connection.execute(
            "SELECT n.nspname || '.' || c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f')"
            " AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\\_toast%'"
            " AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid AND d.deptype = 'e')"
            " ORDER BY c.relkind = 'S', 1"
        )
    ]


def refuse_unless_empty(database: Database, found: list[str]) -> None:
    if found:
        shown = ", ".join(found[:5]) + (f" and {len(found) - 5} more" if len(found) > 5 else "")
        holds = "holds rows in" if database.vendor == "sqlite" else "has tables or sequences:"
        raise CommandError(
            f"refusing to restore into {database}: it is not empty (it {holds} {shown}); nothing was changed."
            " Restore into a new, empty database (docs/guide/deploy.md, \"Backup and restore\")"
        )


def run(database: Database, command: list[str], *, stdout, failing: str) -> bytes:
    if shutil.which(command[0]) is None:
        raise CommandError(f"{command[0]} is not installed: install PostgreSQL's client programs, of the server's major version or later")
    done = subprocess.run(command, env=database.libpq_environment(), stdout=stdout, stderr=subprocess.PIPE)
    if done.returncode != 0:
        raise CommandError(f"{failing} failed: {command[0]} exited {done.returncode}: {done.stderr.decode(errors='replace').strip()}")
    return done.stdout or b""


