"""The JSON log format (dashboard/json_logs.py): one parseable line per record, whatever it carries."""

from __future__ import annotations

import json
import logging
import sys
from datetime import datetime, timezone

from dashboard.json_logs import FIELDS, JsonFormatter, note
from tests.dashboard.test_settings import manage


def record(message: str, *args, exc_info=None, **extra) -> logging.LogRecord:
    made = logging.LogRecord("turnlog.test", logging.WARNING, __file__, 1, message, args, exc_info)
    made.__dict__.update(extra)
    return made


def test_a_record_is_one_json_line_with_its_fields():
    when = datetime(2026, 12, 5, tzinfo=timezone.utc)
    text = JsonFormatter().format(record("%s appended", "agent", fields={"status": 201, "at": when, "who": object()}))
    line = json.loads(text)
    assert {k: line[k] for k in ("level", "logger", "message", "status")} == {
        "level": "WARNING", "logger": "turnlog.test", "message": "agent appended", "status": 201,
    }  # fmt: skip
    assert line["at"] == when.isoformat() and line["who"].startswith("<object object")
    assert datetime.fromisoformat(line["time"]).tzinfo is not None


def test_a_traceback_stays_on_the_line():
    try:
        raise ValueError("bad\nvalue")
    except ValueError:
        text = JsonFormatter().format(record("failed", exc_info=sys.exc_info()))
    assert "\n" not in text
    line = json.loads(text)
    assert line["exception"].startswith("Traceback") and "ValueError: bad\nvalue" in line["exception"]


def test_notes_go_only_to_a_line_that_is_kept():
    scope: dict = {"type": "http"}
    note(scope, user="ada")
    assert scope == {"type": "http"}
    scope[FIELDS] = {}
    note(scope, user="ada", project=None)
    assert scope[FIELDS] == {"user": "ada"}


def test_an_unknown_log_format_is_refused():
    checked = manage("check", TURNLOG_LOG_FORMAT="xml")
    assert checked.returncode != 0 and "TURNLOG_LOG_FORMAT must be 'text' or 'json', not 'xml'" in checked.stderr


def test_a_command_logs_in_json_too():
    shown = manage("shell", "-c", "import logging; logging.getLogger('turnlog.demo').warning('hello %s', 'there')", TURNLOG_LOG_FORMAT="json")
    assert shown.returncode == 0, shown.stderr
    (line,) = [json.loads(text) for text in shown.stderr.splitlines() if text.startswith("{")]
    assert (line["logger"], line["message"]) == ("turnlog.demo", "hello there")
