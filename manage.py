#!/usr/bin/env python
import os
import sys

if __name__ == "__main__":
    # The configuration file (TURNLOG_CONFIG, else /etc/turnlog.env) under the environment, before the settings.
    from dashboard import config_file

    config_file.load_or_exit()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")
    from django.core.management import execute_from_command_line

    from dashboard import sqlite_guard

    command = sys.argv[1] if len(sys.argv) > 1 else "help"
    if command == "recovery_worker":
        sqlite_guard.exit_if_missing()
    sqlite_guard.refuse_to_create(command)
    execute_from_command_line(sys.argv)
