"""The configuration file: parsed as systemd parses `EnvironmentFile=`, read under the process environment, and read by
the `turnlog` and `manage.py` processes (never by the tests' own)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dashboard import config_file
from dashboard.config_file import ConfigFileError, load, parse
from tests.servers import PROJECT_DIR, TURNLOG


def values(text: str) -> dict[str, str]:
    return parse(text).values()


def test_key_value_lines_with_whitespace_around_the_key_and_before_the_value():
    assert values("A=1\n  B = two words  \nC=\n") == {"A": "1", "B": "two words", "C": ""}


def test_comment_lines_start_with_a_hash_or_a_semicolon_and_a_value_has_no_comment():
    assert values("# A=1\n ; B=2\nC=3 # not a comment\nD=x;y\n") == {"C": "3 # not a comment", "D": "x;y"}


def test_double_quotes_keep_everything_and_a_backslash_escapes_only_quote_backslash_backquote_dollar():
    assert values('A="  spaced  # kept "\n') == {"A": "  spaced  # kept "}
    assert values(r'A="q\"b\\d\$e\`f\n"' + "\n") == {"A": 'q"b\\d$e`f\\n'}


def test_single_quotes_keep_backslashes():
    assert values("A='a\\b \"c\"'\n") == {"A": 'a\\b "c"'}


def test_quoted_and_unquoted_parts_run_together():
    assert values('A="x y"z\nB=\'p\' "q"\n') == {"A": "x yz", "B": "pq"}


def test_a_backslash_at_the_end_of_a_line_joins_the_next():
    assert values("A=one\\\ntwo\nB=\"three \\\nfour\"\n") == {"A": "onetwo", "B": "three four"}


def test_unquoted_a_backslash_keeps_the_next_character():
    assert values("A=a\\ \\#b\\\\\n") == {"A": "a #b\\"}


def test_a_comment_ending_in_a_backslash_does_not_swallow_the_next_line():
    assert values("# a comment \\\nA=1\n") == {"A": "1"}


def test_a_line_without_an_equals_sign_is_ignored_and_a_later_line_wins():
    assert values("JUNK\nA=1\nA=2") == {"A": "2"}


def test_invalid_names_are_set_aside_with_their_line():
    parsed = parse("A=1\nexport B=2\n9C=3\nD-E=4\n")
    assert parsed.values() == {"A": "1"}
    assert [(a.name, a.line) for a in parsed.invalid] == [("export B", 2), ("9C", 3), ("D-E", 4)]


def test_crlf_lines_and_a_byte_order_mark():
    assert values("\ufeffA=1\r\nB=\"2\"\r\n") == {"A": "1", "B": "2"}


def test_the_process_environment_wins_and_each_override_is_recorded(tmp_path: Path):
    path = tmp_path / "turnlog.env"
    path.write_text("TURNLOG_STALL_SECONDS=60\nTURNLOG_DB_POOL_SIZE=8\n")
    environ = {"TURNLOG_CONFIG": str(path), "TURNLOG_DB_POOL_SIZE": "4"}
    loaded = load(environ)
    assert environ["TURNLOG_STALL_SECONDS"] == "60" and environ["TURNLOG_DB_POOL_SIZE"] == "4"
    assert (loaded.path, loaded.overridden) == (path, ["TURNLOG_DB_POOL_SIZE"])


def test_an_empty_turnlog_config_reads_no_file():
    environ = {"TURNLOG_CONFIG": ""}
    assert load(environ).path is None and environ == {"TURNLOG_CONFIG": ""}


def test_a_missing_or_unreadable_file_named_is_an_error_naming_it(tmp_path: Path):
    with pytest.raises(ConfigFileError, match=f"{tmp_path}/missing.env does not exist"):
        load({"TURNLOG_CONFIG": str(tmp_path / "missing.env")})
    with pytest.raises(ConfigFileError, match=f"{tmp_path} is a directory"):
        load({"TURNLOG_CONFIG": str(tmp_path)})
    (tmp_path / "latin.env").write_bytes(b"A=\xe9\n")
    with pytest.raises(ConfigFileError, match="latin.env is not UTF-8"):
        load({"TURNLOG_CONFIG": str(tmp_path / "latin.env")})


def test_the_tests_read_no_configuration_file():
    assert os.environ["TURNLOG_CONFIG"] == "" and config_file.config_path(os.environ) is None


# The processes: `turnlog` and manage.py read the file, under their environment.

PRINT_SETTINGS = "from django.conf import settings; print(settings.TURNLOG_STALL_SECONDS, settings.AXES_FAILURE_LIMIT)"


@pytest.fixture
def process_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "TURNLOG_"))}
    (tmp_path / "turnlog.env").write_text('# the file\nTURNLOG_STALL_SECONDS="77"\nTURNLOG_LOGIN_FAILURE_LIMIT=9\n')
    return {**env, "TURNLOG_CONFIG": str(tmp_path / "turnlog.env"), "TURNLOG_DATA_DIR": str(tmp_path / "data")}


@pytest.mark.parametrize("command", [[str(TURNLOG), "manage"], [sys.executable, "manage.py"]], ids=["turnlog", "manage.py"])
def test_a_setting_from_the_file_takes_effect_and_the_environment_wins(command, process_env):
    run = subprocess.run([*command, "shell", "--no-imports", "-c", PRINT_SETTINGS], env=process_env, cwd=PROJECT_DIR,
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert (run.returncode, run.stdout.split()) == (0, ["77", "9"]), run.stderr
    run = subprocess.run([*command, "shell", "--no-imports", "-c", PRINT_SETTINGS], env={**process_env, "TURNLOG_STALL_SECONDS": "5"},
                         cwd=PROJECT_DIR, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert (run.returncode, run.stdout.split()) == (0, ["5", "9"]), run.stderr


@pytest.mark.parametrize("command", [[str(TURNLOG), "manage"], [sys.executable, "manage.py"]], ids=["turnlog", "manage.py"])
def test_a_missing_file_named_by_turnlog_config_stops_the_command(command, process_env, tmp_path: Path):
    env = {**process_env, "TURNLOG_CONFIG": str(tmp_path / "nowhere.env")}
    run = subprocess.run([*command, "showmigrations"], env=env, cwd=PROJECT_DIR, capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr == f"turnlog: the configuration file {tmp_path / 'nowhere.env'} does not exist\n"
    assert not (tmp_path / "data").exists()  # nothing ran


@pytest.mark.skipif(os.geteuid() != 0, reason="drops to another user: needs root")
def test_a_file_the_user_cannot_read_stops_the_command_naming_it(tmp_path: Path):
    """As the services' user would find a root-only file: the process drops to nobody once Python has started
    (the interpreter itself may live where only root reads), then reads the configuration."""
    path = tmp_path / "turnlog.env"
    path.write_text("TURNLOG_STALL_SECONDS=60\n")
    path.chmod(0o600)
    tmp_path.chmod(0o755)
    script = "import os; from dashboard import config_file; os.setgid(65534); os.setuid(65534); config_file.load_or_exit()"
    run = subprocess.run([sys.executable, "-c", script], env={**os.environ, "TURNLOG_CONFIG": str(path)}, cwd=PROJECT_DIR,
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert run.returncode == 2
    assert run.stderr == f"turnlog: the configuration file {path} cannot be read by this user (uid 65534): mode, owner or group\n"
