"""The table of variables (dashboard/variables.py) is what the code reads, the sample configuration is written from it,
and docs/settings.md lists the same set: a variable added to the code and not to them, or left in them after the code
stopped reading it, fails here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dashboard import config_file
from dashboard.variables import NOT_SETTINGS, VARIABLES, Variable, sample, value_problem

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "deploy" / "turnlog.env.sample"
READ = re.compile(
    r'(?:environ\.get|env_flag|getenv|environ\.setdefault)\(\s*"([A-Z0-9_]+)"|environ\[\s*"([A-Z0-9_]+)"\s*\]'
    r'|ENVIRONMENT_VARIABLE = "([A-Z0-9_]+)"'
)
# The platform's own, read to find the user's data directory (dashboard/locations.py): not Turnlog's settings.
PLATFORM = {"LOCALAPPDATA", "XDG_DATA_HOME"}


def names_the_code_reads() -> set[str]:
    found = set()
    for path in [*(ROOT / "dashboard").rglob("*.py"), *(ROOT / "sessions_app").rglob("*.py")]:
        if path.name in ("variables.py", "config_check.py"):  # the table itself, and the check reading through it
            continue
        found |= {name for match in READ.findall(path.read_text()) for name in match if name}
    return found - PLATFORM - NOT_SETTINGS


def test_the_table_is_every_variable_the_code_reads():
    read = names_the_code_reads()
    assert {"DATABASE_URL", "TURNLOG_DB_POOL_SIZE", "DJANGO_SECRET_KEY", "PROMETHEUS_MULTIPROC_DIR"} <= read
    assert sorted(read - set(VARIABLES)) == [], "read by the code, missing from dashboard/variables.py"
    assert sorted(set(VARIABLES) - read) == [], "in dashboard/variables.py, read by no code"


def test_the_tables_kinds_and_defaults_are_how_settings_reads_them():
    source = (ROOT / "dashboard" / "settings.py").read_text()
    numbers = re.findall(r'\b(int|float)\(os\.environ\.get\("([A-Z0-9_]+)"(?:, (?:"([0-9.]+)"|str\(([^)]*)\)))?\)', source)
    assert len(numbers) >= 20
    for kind, name, default, computed in numbers:
        variable = VARIABLES[name]
        assert variable.kind == kind, name
        if default and re.fullmatch(r"[0-9.]+", variable.default):
            assert float(variable.default) == float(default), name
        if computed:  # e.g. str(3 * 24 * 3600)
            assert float(variable.default) == eval(computed), name  # noqa: S307: the settings' own constant expression
    for name in re.findall(r'env_flag\("([A-Z0-9_]+)"', source):
        assert VARIABLES[name].kind == "flag", name


def test_the_sample_configuration_is_written_from_the_table():
    assert SAMPLE.read_text() == sample(), "run: python -m dashboard.variables > deploy/turnlog.env.sample"


def test_the_sample_names_every_variable_once_commented_with_its_default():
    lines = SAMPLE.read_text().splitlines()
    named = [line[1:].split("=", 1)[0] for line in lines if re.fullmatch(r"#[A-Z0-9_]+=", line)]
    assert sorted(named) == sorted(VARIABLES)
    for name in named:
        doc = lines[lines.index(f"#{name}=") - 1]
        assert doc.startswith("# ") and f"Default: {VARIABLES[name].default}." in doc, name


def test_the_sample_is_a_valid_configuration_file_that_sets_nothing():
    parsed = config_file.parse(SAMPLE.read_text())
    assert (parsed.assignments, parsed.invalid) == ([], [])


def test_the_settings_page_lists_the_same_variables():
    page = (ROOT / "docs" / "settings.md").read_text()
    documented = set(re.findall(r"^\| `([A-Z0-9_]+)` \|", page, flags=re.MULTILINE))
    assert documented == set(VARIABLES) | {"TURNLOG_CONFIG"}


@pytest.mark.parametrize(
    ("name", "value", "problem"),
    [
        ("TURNLOG_DB_POOL_SIZE", "16", None),
        ("TURNLOG_DB_POOL_SIZE", "1.5", "TURNLOG_DB_POOL_SIZE is '1.5', not a whole number"),
        ("TURNLOG_DB_POOL_SIZE", "0", "TURNLOG_DB_POOL_SIZE is '0': it must be at least 1"),
        ("TURNLOG_DB_POOL_TIMEOUT", "2.5", None),
        ("TURNLOG_DB_POOL_TIMEOUT", "0", "TURNLOG_DB_POOL_TIMEOUT is '0': it must be above 0"),
        ("TURNLOG_DB_POOL_TIMEOUT", "soon", "TURNLOG_DB_POOL_TIMEOUT is 'soon', not a number"),
        ("TURNLOG_WS_MAX_MESSAGE_BYTES", "", None),
        ("DJANGO_DEBUG", "On", None),
        ("DJANGO_DEBUG", "enabled", "DJANGO_DEBUG is 'enabled', not a flag (1, true, yes, on; or 0, false, no, off): it reads as off"),
        ("TURNLOG_ENV", "Production", None),
        ("TURNLOG_ENV", "prod", "TURNLOG_ENV is 'prod', not one of development, production"),
        ("DJANGO_LOG_LEVEL", "info", "DJANGO_LOG_LEVEL is 'info', not one of DEBUG, INFO, WARNING, ERROR, CRITICAL"),
        ("DATABASE_URL", "anything", None),
    ],
)
def test_value_problems_name_the_variable_and_what_it_needs(name: str, value: str, problem: str | None):
    variable: Variable = VARIABLES[name]
    assert value_problem(variable, value) == problem
