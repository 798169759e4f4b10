"""`turnlog`, the command of an installed Turnlog (pyproject's [project.scripts]), as `make run` is the source tree's.

    turnlog serve [--host H] [--port P]   migrate if needed, then the server (Daphne) and the worker, as `make run`
    turnlog daphne [DAPHNE OPTIONS]       one server process alone: Daphne serving the site with its websocket limits
    turnlog worker [OPTIONS]              the worker alone (`manage.py recovery_worker [OPTIONS]`)
    turnlog manage COMMAND [ARGS]         any management command (`manage.py COMMAND [ARGS]`)
    turnlog check                         validate the configuration and the database, listing every problem
    turnlog backup [--force] PATH         back up the database to PATH (`manage.py backup`)
    turnlog restore PATH                  restore a backup into an empty database (`manage.py restore`)

Each reads the configuration file first (dashboard/config_file.py: TURNLOG_CONFIG, else /etc/turnlog.env).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys

from dashboard import config_file, sqlite_guard

SETTINGS_MODULE = "dashboard.settings"
APPLICATION = "dashboard.asgi:application"
MANAGE = "turnlog manage"  # what the commands' help and messages call manage.py here
# Any of these stops `turnlog serve` and, gracefully, both its processes.
STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))  # no SIGHUP on Windows


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # Before anything imports the settings (or prometheus-client, which reads PROMETHEUS_MULTIPROC_DIR at import).
    loaded = config_file.load_or_exit()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", SETTINGS_MODULE)
    # Only serve (which migrates) and restore create a SQLite database; the others stop on a missing one.
    command = {"manage": argv[1] if len(argv) > 1 else "help", "worker": "recovery_worker"}.get(argv[0], argv[0]) if argv else "help"
    if command == "recovery_worker":
        sqlite_guard.exit_if_missing()
    elif command == "daphne":
        sqlite_guard.warn_if_missing()
    if command not in ("serve", "check"):  # check reports a missing database itself, among the other problems
        sqlite_guard.refuse_to_create(command)
    if argv[:1] == ["daphne"]:  # every argument after it is Daphne's
        return daphne(argv[1:])
    # Every argument after `manage` or `worker` is Django's to parse (argparse would take their options as ours).
    if argv[:1] in (["manage"], ["worker"], ["backup"], ["restore"]):
        from django.core.management import execute_from_command_line

        command = {"manage": [], "worker": ["recovery_worker"]}.get(argv[0], argv[:1])
        execute_from_command_line([MANAGE if argv[0] in ("manage", "worker") else "turnlog", *command, *argv[1:]])
        return 0
    parser = argparse.ArgumentParser(prog="turnlog", description="Turnlog: a live dashboard and API for AI-agent session logs.")
    commands = parser.add_subparsers(dest="command", required=True)
    serve_parser = commands.add_parser("serve", help="migrate if needed, then run the server and the worker")
    serve_parser.add_argument("--host", default="127.0.0.1", help="the address to listen on (default 127.0.0.1)")
    serve_parser.add_argument("--port", type=int, default=8000, help="the port to listen on (default 8000)")
    commands.add_parser("daphne", help="run one server process alone: Daphne with the site's websocket limits [DAPHNE OPTIONS]")
    commands.add_parser("worker", help="run the worker alone: manage.py recovery_worker [--once] [--interval SECONDS]")
    commands.add_parser("manage", help="run a management command: manage.py COMMAND [ARGS]")
    commands.add_parser("check", help="validate the configuration and the database, list every problem (exit 1 if any)")
    commands.add_parser("backup", help="back up the database to a new file of mode 0600: manage.py backup [--force] PATH")
    commands.add_parser("restore", help="restore a backup into an empty database: manage.py restore PATH")
    arguments = parser.parse_args(argv)
    if arguments.command == "check":
        from dashboard import config_check

        return config_check.run(loaded)
    return serve(arguments.host, arguments.port)


def serve(host: str, port: int) -> int:
    """`make run`'s processes: the server in front, the worker beside it, stopped when the server exits."""
    import django
    from django.conf import settings
    from django.core.management import call_command
    from django.db import connections

    django.setup()
    migrate_if_needed()
    call_command("local_setup", host=host, port=port, manage_command=MANAGE)
    if settings.DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
        print(f"  data:       {settings.TURNLOG_DATA_DIR} (TURNLOG_DATA_DIR)\n", flush=True)
    connections.close_all()  # the children open their own

    processes: list[subprocess.Popen] = []
    stopping = False

    def stop(_signum, _frame):
        nonlocal stopping
        stopping = True
        for process in processes:
            if process.poll() is None:
                process.terminate()  # SIGTERM: both stop gracefully on it

    for signum in STOP_SIGNALS:
        signal.signal(signum, stop)
    # Each in a session of its own, so that a terminal's Ctrl-C reaches them once, through here. Unbuffered:
    # their lines reach a log file or journal as they are written, not when a buffer fills.
    options = {"start_new_session": True, "env": {**os.environ, "PYTHONUNBUFFERED": "1", "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir(settings))}}
    processes.append(subprocess.Popen([sys.executable, "-m", "django", "recovery_worker"], **options))
    worker = processes[0]
    try:
        if stopping:
            return 128 + signal.SIGTERM.value
        server = subprocess.Popen([sys.executable, "-m", "daphne", *daphne_options(), "-b", host, "-p", str(port), APPLICATION], **options)
        processes.append(server)
        if stopping:
            server.terminate()
        code = server.wait()
    finally:
        if worker.poll() is None:
            worker.terminate()
        worker.wait()
    # Killed by a signal: the shell's convention (128 + its number), as `make run` exits 130 on Ctrl-C.
    return code if code >= 0 else 128 - code


def daphne_options() -> list[str]:
    """Daphne's options every way of starting it passes: the websocket limits of the settings (Daphne's own
    default, 1 MiB, is below the frame of an event the API accepts; dashboard/settings.py)."""
    from django.conf import settings

    limit = str(settings.TURNLOG_WS_MAX_MESSAGE_BYTES)
    return ["--websocket-max-message-size", limit, "--websocket-max-frame-size", limit]


def daphne(arguments: list[str]) -> int:
    """`daphne [OPTIONS] dashboard.asgi:application` in this process, with daphne_options() before OPTIONS."""
    from daphne.cli import CommandLineInterface

    command = [*daphne_options(), *arguments, APPLICATION]
    sys.argv = ["daphne", *command]  # as Daphne's own command: dashboard.asgi checks the limit it was given
    CommandLineInterface().run(command)
    return 0


def refuse_a_small_daphne_limit(argv: list[str]) -> None:
    """ImproperlyConfigured when `argv` is Daphne's command (`daphne`, `python -m daphne`) with a websocket
    message limit below TURNLOG_WS_MAX_MESSAGE_BYTES, Daphne's default of 1 MiB included: its streams would
    fail on the first event whose frame is larger, and close 4500 on every reconnect."""
    from pathlib import Path

    if not argv or not (Path(argv[0]).name == "daphne" or Path(argv[0]).parts[-2:] == ("daphne", "__main__.py")):
        return
    from daphne.cli import CommandLineInterface
    from django.conf import settings
    from django.core.exceptions import ImproperlyConfigured

    given = CommandLineInterface().parser.parse_known_args(argv[1:])[0].websocket_max_message_size
    needed = settings.TURNLOG_WS_MAX_MESSAGE_BYTES
    if 0 < given < needed:  # 0: no limit
        raise ImproperlyConfigured(
            f"Daphne's websocket message limit is {given} bytes, below TURNLOG_WS_MAX_MESSAGE_BYTES ({needed}): start it as"
            f" `turnlog daphne [OPTIONS]`, which passes the limits, or pass --websocket-max-message-size {needed}"
            f" --websocket-max-frame-size {needed}"
        )


def metrics_dir(settings) -> str:
    """Where both processes write their metrics (docs/guide/metrics.md): emptied at each start, as `make run` does."""
    import shutil
    from pathlib import Path

    path = Path(os.environ.get("PROMETHEUS_MULTIPROC_DIR") or settings.TURNLOG_DATA_DIR / "prometheus")
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return str(path)


def migrate_if_needed() -> None:
    """Apply the migrations this version has and the database has not (a first start, an upgrade), then the
    TURNLOG_INIT_* variables' first start (migrate runs it after its migrations; `first_start` alone otherwise)."""
    from django.core.management import call_command
    from django.db import connections
    from django.db.migrations.executor import MigrationExecutor

    executor = MigrationExecutor(connections["default"])
    if executor.migration_plan(executor.loader.graph.leaf_nodes()):
        call_command("migrate", interactive=False)
    else:
        call_command("first_start")
