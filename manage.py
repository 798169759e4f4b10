#!/usr/bin/env python
import os
import sys

if __name__ == "__main__":
    # The configuration file (TURNLOG_CONFIG, else /etc/turnlog.env) under the environment, before the settings.
    from dashboard import config_file

    config_file.load_or_exit()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
