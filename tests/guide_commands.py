"""The commands docs/guide/deploy.md tells an operator to run, read from the guide itself: its shell blocks' lines
(comments dropped) and its inline code, whitespace made single. The tests that run them as written read them
here, and tests/deploy/test_guide_commands.py checks each `turnlog`, `nginx -t`, `openssl` and `pg_dump` command
is one of those RUN_BY_TESTS lists."""

from __future__ import annotations

import re
from pathlib import Path

PROJECT_DIR = Path(__file__).resolve().parent.parent
GUIDE = PROJECT_DIR / "docs" / "guide" / "deploy.md"
FENCE = re.compile(r"^[ \t]*```[a-z]*\n(.*?)^[ \t]*```", flags=re.MULTILINE | re.DOTALL)  # in a list item too
# A command: optional VAR=value assignments, then the program and at least one argument (a program's name alone,
# as in "the user `turnlog`" or "runs `pg_dump`", names it; it is no command).
COMMAND = re.compile(r"(?:[A-Z_]+=\S+ )*(?P<program>turnlog|nginx|openssl|pg_dump|pg_restore) \S.*")
CHECKED = ("turnlog", "nginx", "openssl", "pg_dump")  # the programs whose every command a test must run

# Each command of the guide a test runs, as a pattern (a placeholder such as 800K or `...` stands for any value),
# with the test that runs it as written.
RUN_BY_TESTS = {
    r"turnlog daphne( -b 127\.0\.0\.1 -p \S+)?": "tests/deploy/test_watchdog.py::test_daphne_says_it_is_ready_once_listening_then_pings_from_its_event_loop_until_frozen",
    r"turnlog worker": "tests/deploy/test_watchdog.py::test_the_worker_says_it_is_ready_then_pings_from_its_loop_until_frozen",
    r"turnlog manage migrate --noinput": "tests/sessions_app/test_upgrade.py::test_a_database_written_by_the_last_release_reads_back_after_migrate_and_its_tokens_and_users_still_work",
    r"turnlog manage tokens create .*": "tests/sessions_app/test_upgrade.py::test_a_database_written_by_the_last_release_reads_back_after_migrate_and_its_tokens_and_users_still_work",
    r"turnlog manage collectstatic --noinput": "tests/sessions_app/management/test_backup.py::test_the_guide_s_backup_restore_and_upgrade_commands_run_as_written",
    r"turnlog manage (migrate|showmigrations)": "tests/sessions_app/management/test_backup.py::test_the_guide_s_backup_restore_and_upgrade_commands_run_as_written",
    r"turnlog (backup|restore) .*": "tests/sessions_app/management/test_backup.py::test_the_guide_s_backup_restore_and_upgrade_commands_run_as_written",
    r"(TURNLOG_CONFIG=\S+ )?turnlog check": "tests/dashboard/test_config_check.py::test_every_turnlog_check_command_of_the_guides_runs_clean",
    r"turnlog manage (first_start|tokens list)": "tests/sessions_app/management/test_first_start.py::test_the_guides_first_start_commands_run_as_written",
    r"turnlog serve": "tests/dashboard/test_cli.py::test_the_installed_command_migrates_serves_and_stops",
    r"nginx -t": "tests/deploy/test_nginx_site.py::test_the_guides_openssl_and_nginx_t_commands_accept_the_site_file_in_a_minimal_main_config",
    r"openssl req .*": "tests/deploy/test_nginx_site.py::test_the_guides_openssl_and_nginx_t_commands_accept_the_site_file_in_a_minimal_main_config",
}


def section(text: str, title: str) -> str:
    """The part of a guide under `## title`, up to the next `## ` heading."""
    return text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def block_commands(text: str) -> list[str]:
    """The commands of the shell blocks in `text`, each line's comment dropped."""
    lines = [re.sub(r"\s+#.*", "", line).strip() for block in FENCE.findall(text) for line in block.splitlines()]
    return [" ".join(line.split()) for line in lines if COMMAND.fullmatch(" ".join(line.split()))]


def inline_commands(text: str) -> list[str]:
    """The commands written inline in backquotes in `text` (outside its blocks), one even when split over lines."""
    spans = [" ".join(code.split()) for code in re.findall(r"`([^`]+)`", FENCE.sub("", text))]
    return [span for span in spans if COMMAND.fullmatch(span)]


def guide_commands(*programs: str, sections: tuple[str, ...] = (), guide: Path = GUIDE) -> list[str]:
    """The guide's commands running one of `programs` (all of them when none is given), in its blocks first and
    then inline, in the order written; only in `sections` (their `## ` titles) when given."""
    text = guide.read_text()
    parts = [section(text, title) for title in sections] if sections else [text]
    found = [c for part in parts for c in block_commands(part)] + [c for part in parts for c in inline_commands(part)]
    return [c for c in found if not programs or COMMAND.fullmatch(c)["program"] in programs]


def unregistered(commands: list[str]) -> list[str]:
    """The commands of CHECKED programs no RUN_BY_TESTS pattern matches."""
    checked = [c for c in commands if COMMAND.fullmatch(c)["program"] in CHECKED]
    return [c for c in checked if not any(re.fullmatch(pattern, c) for pattern in RUN_BY_TESTS)]
