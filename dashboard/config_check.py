"""`turnlog check`: everything an operator's configuration can get wrong, found before anything starts.

Every problem is listed, not only the first; the settings are imported in a way that survives bad values
(those already reported are left out for it), so that the database is checked too.
"""

from __future__ import annotations

import difflib
import os
import stat
import sys
from dataclasses import dataclass, field

from dashboard import config_file
from dashboard.variables import KNOWN, VARIABLES, value_problem

PREFIXES = ("TURNLOG_", "DJANGO_")


@dataclass
class Report:
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        return [
            *(f"note: {note}" for note in self.notes),
            *(f"warning: {warning}" for warning in self.warnings),
            *(f"problem: {problem}" for problem in self.problems),
        ]


def closest(name: str) -> str:
    match = difflib.get_close_matches(name, sorted(KNOWN), n=1, cutoff=0.6)
    return f" (did you mean {match[0]}?)" if match else ""


def check_file(loaded: config_file.LoadedConfig, report: Report) -> None:
    if loaded.path is None:
        where = "TURNLOG_CONFIG is empty" if config_file.VARIABLE in os.environ else f"{config_file.DEFAULT_PATH} does not exist"
        report.notes.append(f"no configuration file read ({where}): the process environment alone")
        return
    report.notes.append(f"configuration file {loaded.path}: {len(loaded.values)} variables")
    mode = loaded.path.stat().st_mode
    if mode & stat.S_IROTH:
        report.warnings.append(
            f"{loaded.path} is readable by every user (mode {stat.S_IMODE(mode):04o}): it may hold secrets;"
            f" chown root:turnlog {loaded.path} && chmod 0640 {loaded.path}"
        )
    for assignment in loaded.invalid:
        report.problems.append(
            f"{loaded.path} line {assignment.line}: {assignment.name!r} is not a variable name (letters, digits, _):"
            " the line is ignored"
        )
    for name in loaded.values:
        if name == config_file.VARIABLE:
            report.problems.append(f"{loaded.path}: TURNLOG_CONFIG has no effect inside the file it names")
        elif name not in KNOWN and (name.startswith(PREFIXES) or closest(name)):
            report.problems.append(f"{loaded.path}: unknown variable {name}{closest(name)}")
    for name in loaded.overridden:
        same = "the same value" if os.environ[name] == loaded.values[name] else "a different value"
        report.notes.append(f"{name} is set in the process environment, which wins over {loaded.path} ({same})")


def check_environment(loaded: config_file.LoadedConfig, report: Report) -> set[str]:
    """The variables' values; returns the names whose values are refused."""
    for name in sorted(os.environ):
        if name.startswith(PREFIXES) and name not in KNOWN and name not in loaded.values:
            report.problems.append(f"unknown variable {name} in the process environment{closest(name)}")
    refused = set()
    for name, variable in VARIABLES.items():
        if name in os.environ:
            problem = value_problem(variable, os.environ[name])
            if problem:
                report.problems.append(problem + source_of(name, loaded))
                refused.add(name)
    production = os.environ.get("TURNLOG_ENV", "").strip().lower() == "production"
    if production and not os.environ.get("DJANGO_SECRET_KEY", "").strip():
        report.problems.append(
            "TURNLOG_ENV=production without DJANGO_SECRET_KEY: set one, the same in every process"
            " (python -c 'import secrets; print(secrets.token_urlsafe(50))')"
        )
        refused.add("DJANGO_SECRET_KEY")
    return refused


def source_of(name: str, loaded: config_file.LoadedConfig) -> str:
    if name in loaded.values and name not in loaded.overridden:
        return f" (in {loaded.path})"
    return " (in the process environment)"


def check_settings_and_database(refused: set[str], report: Report) -> None:
    """Import the settings without the values already refused (their defaults instead), then reach the database."""
    for name in refused - {"DJANGO_SECRET_KEY"}:
        os.environ.pop(name, None)
    if "DJANGO_SECRET_KEY" in refused:
        import secrets

        # Only to get past the refusal reported above (random, so that Django's check of its strength stays quiet).
        os.environ["DJANGO_SECRET_KEY"] = secrets.token_urlsafe(50)
    try:
        import django
        from django.conf import settings

        django.setup()
    except Exception as error:  # noqa: BLE001: any failure of the settings is a problem to list
        report.problems.append(f"the settings cannot be loaded: {type(error).__name__}: {error}")
        report.problems.append("the database was not checked (the settings did not load)")
        return
    check_django(settings, report)
    from sessions_app.services import first_start

    try:  # what migrate would refuse, found before it runs
        first_start.plan_from(os.environ)
    except first_start.InitError as error:
        report.problems.append(f"first start: {error}")
    database = settings.DATABASES["default"]
    sqlite = database["ENGINE"] == "django.db.backends.sqlite3"
    if sqlite:
        shown = database["NAME"]
    else:
        engine = database["ENGINE"].rsplit(".", 1)[-1]
        shown = f"{engine} {database.get('HOST') or 'localhost'}:{database.get('PORT') or 5432}/{database['NAME']}"
    if sqlite and not os.path.exists(database["NAME"]):
        report.problems.append(f"the database {shown} does not exist: `turnlog manage migrate` creates it")
        return
    if not sqlite:
        # One direct connection, refused at once or within 5 s: the pool would retry until its timeout.
        database.setdefault("OPTIONS", {}).pop("pool", None)
        database["OPTIONS"].setdefault("connect_timeout", 5)
    from django.db import connections
    from django.db.migrations.executor import MigrationExecutor

    try:
        connection = connections["default"]
        connection.ensure_connection()
        executor = MigrationExecutor(connection)
        pending = executor.migration_plan(executor.loader.graph.leaf_nodes())
    except Exception as error:  # noqa: BLE001
        report.problems.append(f"the database {shown} cannot be reached: {' '.join(str(error).split())}")
        return
    finally:
        connections.close_all()
    if pending:
        names = ", ".join(f"{migration.app_label}.{migration.name}" for migration, _ in pending[:5])
        more = f" and {len(pending) - 5} more" if len(pending) > 5 else ""
        report.problems.append(
            f"the database {shown} is not migrated: {len(pending)} migrations pending ({names}{more}):"
            " run `turnlog manage migrate`"
        )
    else:
        report.notes.append(f"the database {shown} is reachable and migrated")


def check_django(settings, report: Report) -> None:
    """Django's system checks, its deployment checks too in production (what `manage.py check --deploy` says)."""
    from django.core import checks

    try:
        messages = checks.run_checks(include_deployment_checks=settings.PRODUCTION)
    except Exception as error:  # noqa: BLE001
        report.problems.append(f"Django's checks failed: {type(error).__name__}: {error}")
        return
    for message in messages:
        if message.is_silenced():
            continue
        text = f"{message.id}: {' '.join(str(message.msg).split())}"
        (report.problems if message.is_serious() else report.warnings).append(f"Django's check {text}")


def check_redis(report: Report) -> None:
    """The channel layer's Redis, when REDIS_URL names one: without it no live event crosses processes."""
    url = os.environ.get("REDIS_URL", "")
    if not url:
        return
    import redis

    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=3, socket_timeout=3)
        try:
            client.ping()
        finally:
            client.close()
    except Exception as error:  # noqa: BLE001: a bad URL or an unreachable server alike
        report.problems.append(f"REDIS_URL: Redis cannot be reached: {' '.join(str(error).split())}")
    else:
        report.notes.append("Redis (REDIS_URL) is reachable")


def run(loaded: config_file.LoadedConfig) -> int:
    report = Report()
    check_file(loaded, report)
    refused = check_environment(loaded, report)
    check_settings_and_database(refused, report)
    check_redis(report)
    for line in report.lines():
        print(line)
    if report.problems:
        print(f"turnlog check: {counted(len(report.problems), 'problem')}", file=sys.stderr)
        return 1
    print(f"turnlog check: no problems ({counted(len(report.warnings), 'warning')})")
    return 0


def counted(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"

