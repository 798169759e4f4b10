"""`turnlog check`, run as an operator runs it: every problem of a configuration listed at once, exit 1 if any, 0 when
clean; never a crash on bad values."""

from __future__ import annotations

import os
import re
import secrets
import sqlite3
import subprocess
from pathlib import Path

import pytest

from tests.guide_commands import guide_commands
from tests.servers import PROJECT_DIR, TURNLOG, database_url, free_port

KEY = secrets.token_urlsafe(50)  # Django's deployment check warns about a weak one


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """No TURNLOG_ or DJANGO_ variable of the test run: the file under test holds them."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "TURNLOG_"))}
    clean.pop("DATABASE_URL", None)
    clean.pop("REDIS_URL", None)
    return {**clean, "TURNLOG_CONFIG": str(tmp_path / "turnlog.env"), "TURNLOG_DATA_DIR": str(tmp_path / "data")}


def check(env: dict[str, str], text: str, *, mode: int = 0o640) -> tuple[int, list[str], list[str]]:
    """Writes the file, runs `turnlog check`: its exit status, its problem lines and its other lines."""
    path = Path(env["TURNLOG_CONFIG"])
    path.write_text(text)
    path.chmod(mode)
    run = subprocess.run([TURNLOG, "check"], env=env, cwd=PROJECT_DIR, capture_output=True, text=True, timeout=120)
    assert "Traceback" not in run.stderr, run.stderr
    lines = run.stdout.splitlines()
    return run.returncode, [l for l in lines if l.startswith("problem: ")], [l for l in lines if not l.startswith("problem: ")]


BAD = "TURNLOG_ENV=production\nTURNLOG_STAL_SECONDS=60\nTURNLOG_DB_POOL_SIZE=sixteen\n"


def test_misspelled_name_non_numeric_pool_size_production_without_key_and_unreachable_database_are_all_listed(env):
    port = free_port()  # nothing listens on it
    code, problems, _ = check(env, BAD + f"DATABASE_URL=postgres://turnlog@127.0.0.1:{port}/turnlog\n")
    path = env["TURNLOG_CONFIG"]
    assert code == 1
    assert problems[:3] == [
        f"problem: {path}: unknown variable TURNLOG_STAL_SECONDS (did you mean TURNLOG_STALL_SECONDS?)",
        f"problem: TURNLOG_DB_POOL_SIZE is 'sixteen', not a whole number (in {path})",
        "problem: TURNLOG_ENV=production without DJANGO_SECRET_KEY: set one, the same in every process"
        " (python -c 'import secrets; print(secrets.token_urlsafe(50))')",
    ]
    assert len(problems) == 4 and problems[3].startswith(f"problem: the database postgresql 127.0.0.1:{port}/turnlog cannot be reached: ")
    assert "Connection refused" in problems[3]


def test_misspelled_name_non_numeric_pool_size_production_without_key_and_unmigrated_database_are_all_listed(env, tmp_path):
    database = tmp_path / "empty.sqlite3"
    sqlite3.connect(database).close()  # a database with no table
    code, problems, _ = check(env, BAD + f"DATABASE_URL=sqlite:///{database}\n")
    path = env["TURNLOG_CONFIG"]
    assert code == 1 and len(problems) == 4, problems
    assert problems[:3] == [
        f"problem: {path}: unknown variable TURNLOG_STAL_SECONDS (did you mean TURNLOG_STALL_SECONDS?)",
        f"problem: TURNLOG_DB_POOL_SIZE is 'sixteen', not a whole number (in {path})",
        "problem: TURNLOG_ENV=production without DJANGO_SECRET_KEY: set one, the same in every process"
        " (python -c 'import secrets; print(secrets.token_urlsafe(50))')",
    ]
    assert problems[3].startswith(f"problem: the database {database} is not migrated: ")
    assert "migrations pending (contenttypes.0001_initial, auth.0001_initial," in problems[3]
    assert problems[3].endswith("): run `turnlog manage migrate`")


def test_a_clean_configuration_passes(env, db, settings):
    """The test run's own database (migrated) and Redis, on the backends the suite runs on."""
    from django.db import connection

    url = database_url(connection.settings_dict)
    redis = f"REDIS_URL={os.environ['REDIS_URL']}\n" if os.environ.get("REDIS_URL") else ""
    code, problems, lines = check(env, f"TURNLOG_ENV=production\nDJANGO_SECRET_KEY='{KEY}'\nDATABASE_URL={url}\nTURNLOG_DB_POOL_SIZE=8\n{redis}")
    assert (code, problems) == (0, []), lines
    assert lines[-1] == "turnlog check: no problems (0 warnings)"
    assert any(line.startswith("note: the database ") and line.endswith(" is reachable and migrated") for line in lines)
    assert ("note: Redis (REDIS_URL) is reachable" in lines) == bool(redis)


def test_an_unreachable_redis_is_listed(env, tmp_path):
    database = tmp_path / "db.sqlite3"
    sqlite3.connect(database).close()
    code, problems, _ = check(env, f"DATABASE_URL=sqlite:///{database}\nREDIS_URL=redis://127.0.0.1:{free_port()}/0\n")
    assert code == 1 and len(problems) == 2, problems
    assert problems[1].startswith("problem: REDIS_URL: Redis cannot be reached: ") and "refused" in problems[1]


def test_overrides_by_the_environment_and_a_file_readable_by_others_are_reported_without_failing(env, tmp_path):
    database = tmp_path / "db.sqlite3"
    migrated = subprocess.run([TURNLOG, "manage", "migrate", "-v", "0"], env={**env, "TURNLOG_CONFIG": "", "DATABASE_URL": f"sqlite:///{database}"},
                              cwd=PROJECT_DIR, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert migrated.returncode == 0, migrated.stderr
    env = {**env, "TURNLOG_STALL_SECONDS": "30", "TURNLOG_LOG_FORMAT": "json"}
    code, problems, lines = check(env, f"DATABASE_URL=sqlite:///{database}\nTURNLOG_STALL_SECONDS=60\nTURNLOG_LOG_FORMAT=json\n", mode=0o644)
    path = env["TURNLOG_CONFIG"]
    assert (code, problems) == (0, []), lines
    assert f"note: TURNLOG_STALL_SECONDS is set in the process environment, which wins over {path} (a different value)" in lines
    assert f"note: TURNLOG_LOG_FORMAT is set in the process environment, which wins over {path} (the same value)" in lines
    assert (f"warning: {path} is readable by every user (mode 0644): it may hold secrets; chown root:turnlog {path}"
            f" && chmod 0640 {path}") in lines  # fmt: skip
    assert lines[-1] == "turnlog check: no problems (1 warning)"


def test_every_bad_value_is_listed_and_a_settings_refusal_the_table_cannot_see_is_caught(env):
    # In the environment, not the file: a misspelling, and Django's own variable (not unknown).
    env = {**env, "DJANGO_SECRETKEY": "x", "DJANGO_SUPERUSER_PASSWORD": "x"}
    code, problems, _ = check(env, (
        f"TURNLOG_ENV=production\nDJANGO_SECRET_KEY={KEY}\nDJANGO_DEBUG=1\nTURNLOG_DB_THREADS=-1\nTURNLOG_LOG_FORMAT=xml\n"
        "TURNLOG_OTLP_CLOSER=maybe\nexport TURNLOG_BASE_URL=https://x\nDATABSE_URL=sqlite:///x\n"
    ))  # fmt: skip
    path = env["TURNLOG_CONFIG"]
    assert code == 1
    assert problems == [
        f"problem: {path} line 7: 'export TURNLOG_BASE_URL' is not a variable name (letters, digits, _): the line is ignored",
        f"problem: {path}: unknown variable DATABSE_URL (did you mean DATABASE_URL?)",
        "problem: unknown variable DJANGO_SECRETKEY in the process environment (did you mean DJANGO_SECRET_KEY?)",
        f"problem: TURNLOG_DB_THREADS is '-1': it must be at least 0 (in {path})",
        f"problem: TURNLOG_LOG_FORMAT is 'xml', not one of text, json (in {path})",
        f"problem: TURNLOG_OTLP_CLOSER is 'maybe', not a flag (1, true, yes, on; or 0, false, no, off): it reads as off (in {path})",
        "problem: the settings cannot be loaded: ImproperlyConfigured: DJANGO_DEBUG must be off when TURNLOG_ENV=production",
        "problem: the database was not checked (the settings did not load)",
    ]


def test_without_a_file_the_environment_alone_is_checked(env, tmp_path):
    env = {**env, "TURNLOG_CONFIG": "", "DATABASE_URL": f"sqlite:///{tmp_path / 'absent.sqlite3'}"}
    run = subprocess.run([TURNLOG, "check"], env=env, cwd=PROJECT_DIR, capture_output=True, text=True, timeout=120)
    assert run.returncode == 1
    assert run.stdout.splitlines() == [
        "note: no configuration file read (TURNLOG_CONFIG is empty): the process environment alone",
        f"problem: the database {tmp_path / 'absent.sqlite3'} does not exist: `turnlog manage migrate` creates it",
    ]
    assert not (tmp_path / "absent.sqlite3").exists()


def test_first_start_variables_that_migrate_would_refuse_are_listed(env, tmp_path):
    text = f"DATABASE_URL=sqlite:///{tmp_path / 'absent.sqlite3'}\nTURNLOG_INIT_ADMIN_USERNAME=ops\n"
    text += f"TURNLOG_INIT_ADMIN_PASSWORD_FILE={tmp_path / 'no-password'}\n"
    code, problems, _ = check(env, text)
    assert code == 1
    assert f"problem: first start: TURNLOG_INIT_ADMIN_PASSWORD_FILE names {tmp_path / 'no-password'}, which does not exist" in problems
    assert len(problems) == 2, problems  # and the missing database


GUIDES = [PROJECT_DIR / "docs" / "guide" / "deploy.md", PROJECT_DIR / "docs" / "guide" / "running.md"]


def guide_check_commands() -> list[str]:
    """Every `turnlog check` command of the guides, once each."""
    found = [c for guide in GUIDES for c in guide_commands("turnlog", guide=guide)]
    return list(dict.fromkeys(c for c in found if re.fullmatch(r"(?:[A-Z_]+=\S+ )*turnlog check", c)))


def test_every_turnlog_check_command_of_the_guides_runs_clean(env, tmp_path):
    """Run as written, with the guide's files made in tmp_path: /etc/turnlog.env is the file TURNLOG_CONFIG names
    (the tests never read the machine's own), /srv/turnlog/staging.env another."""
    commands = guide_check_commands()
    assert "turnlog check" in commands and "TURNLOG_CONFIG=/srv/turnlog/staging.env turnlog check" in commands
    database = tmp_path / "db.sqlite3"
    migrated = subprocess.run([TURNLOG, "manage", "migrate", "-v", "0"], env={**env, "TURNLOG_CONFIG": "", "DATABASE_URL": f"sqlite:///{database}"},
                              cwd=PROJECT_DIR, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert migrated.returncode == 0, migrated.stderr
    for name in ("turnlog.env", "staging.env"):
        (tmp_path / name).write_text(f"TURNLOG_ENV=production\nDJANGO_SECRET_KEY={KEY}\nDATABASE_URL=sqlite:///{database}\n")
        (tmp_path / name).chmod(0o640)
    shell_env = {**env, "PATH": f"{TURNLOG.parent}:{env['PATH']}"}
    for command in commands:
        run = subprocess.run(["bash", "-c", command.replace("/srv/turnlog/staging.env", str(tmp_path / "staging.env"))],
                             env=shell_env, cwd=tmp_path, capture_output=True, text=True, timeout=120)  # fmt: skip
        assert run.returncode == 0, (command, run.stdout, run.stderr)
        assert run.stdout.splitlines()[-1] == "turnlog check: no problems (0 warnings)", command


def test_djangos_deployment_checks_run_in_production(env, tmp_path):
    database = tmp_path / "db.sqlite3"
    migrated = subprocess.run([TURNLOG, "manage", "migrate", "-v", "0"], env={**env, "TURNLOG_CONFIG": "", "DATABASE_URL": f"sqlite:///{database}"},
                              cwd=PROJECT_DIR, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert migrated.returncode == 0, migrated.stderr
    code, problems, lines = check(env, f"TURNLOG_ENV=production\nDJANGO_SECRET_KEY={'k' * 50}\nDATABASE_URL=sqlite:///{database}\n")
    assert (code, problems) == (0, []), lines
    (weak,) = [line for line in lines if line.startswith("warning: Django's check ")]
    assert weak.startswith("warning: Django's check security.W009: Your SECRET_KEY has less than 50 characters, less than 5 unique")
    assert lines[-1] == "turnlog check: no problems (1 warning)"
