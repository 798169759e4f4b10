"""Every `turnlog`, `nginx -t`, `openssl` and `pg_dump` command of docs/guide/deploy.md is run by a test: each is
one of tests/guide_commands.py's RUN_BY_TESTS, whose entries name the test that runs it as written."""

from __future__ import annotations

import re

from tests.guide_commands import CHECKED, COMMAND, PROJECT_DIR, RUN_BY_TESTS, guide_commands, unregistered


def test_every_turnlog_nginx_openssl_and_pg_dump_command_of_the_deployment_guide_is_run_by_a_test():
    commands = guide_commands(*CHECKED)
    assert "nginx -t" in commands and "turnlog manage migrate --noinput" in commands and any(c.startswith("openssl ") for c in commands)
    assert unregistered(commands) == [], "add a test that runs each, and its pattern to tests/guide_commands.py's RUN_BY_TESTS"


def test_each_registered_command_is_in_the_guide_and_its_test_exists():
    commands = guide_commands(*CHECKED)
    assert [p for p in RUN_BY_TESTS if not any(re.fullmatch(p, c) for c in commands)] == []  # none left over
    for pattern, test in RUN_BY_TESTS.items():
        path, name = test.split("::")
        assert re.search(rf"^def {name}\(", (PROJECT_DIR / path).read_text(), flags=re.MULTILINE), (pattern, test)


def test_a_new_command_or_a_program_named_alone_is_told_apart():
    assert unregistered(["turnlog manage flush", "pg_dump -Fc turnlog", "turnlog check", "nginx -s reload"]) == [
        "turnlog manage flush", "pg_dump -Fc turnlog", "nginx -s reload"
    ]  # fmt: skip
    assert not COMMAND.fullmatch("turnlog") and not COMMAND.fullmatch("pg_dump")  # the user's or a program's name
    assert COMMAND.fullmatch("TURNLOG_CONFIG=/x.env turnlog check")["program"] == "turnlog"
