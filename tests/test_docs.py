"""The user documentation stays in step with the code: every endpoint, error code,
status and websocket close code the code has is documented, and the README's links resolve."""

import argparse
import re
from pathlib import Path

from django.conf import settings
from django.core.management import load_command_class

from dashboard.live import consumers
from sessions_app import selectors
from sessions_app.api.app import api
from sessions_app.models import AuditEntry, Role, Scope
from sessions_app.selectors import access

ROOT = Path(settings.BASE_DIR)
API_DOC = (ROOT / "docs" / "api.md").read_text()
# Django's own options of every command (--verbosity, --settings ...), documented by Django.
COMMON_OPTIONS = {
    "--help", "--version", "--verbosity", "--settings", "--pythonpath", "--traceback", "--no-color", "--force-color", "--skip-checks"
}
LOG_DOC = (ROOT / "docs" / "session-log.md").read_text()
API_MODULES = sorted(str(path.relative_to(ROOT)) for path in (ROOT / "sessions_app" / "api").glob("*.py"))


def test_every_endpoint_is_documented():
    for path, operations in api.get_openapi_schema()["paths"].items():
        documented = path.replace("{session_id}", "{id}")
        for method in operations:
            assert f"`{method.upper()} {documented}`" in API_DOC, (method, path)


def test_every_error_code_the_api_answers_with_is_documented():
    source = "\n".join(
        (ROOT / name).read_text()
        for name in [*API_MODULES, "sessions_app/log/fork.py", "sessions_app/log/values.py", "dashboard/middleware.py"]
    )
    codes = set(re.findall(r'(?:ApiError\(\d+|error_response\(request, \d+|ForkRefused\()\s*,?\s*"([a-z_]+)"', source))
    codes |= set(re.findall(r'"(?:text|depth)": "([a-z_]+)"', source))
    codes |= set(re.findall(r'"error": "([a-z_]+)"', source))  # JSON answers made outside django-ninja (404, 405, 503)
    codes |= set(re.findall(r'\d{3}: "([a-z_]+)"', source))  # django-ninja's own HTTP errors, renamed
    expected = {"invalid_json", "unauthenticated", "not_found", "too_large", "invalid_boundary", "invalid_text", "too_deep"}
    assert expected | {"method_not_allowed", "database_unavailable", "forbidden"} <= codes
    for code in codes:
        assert re.search(rf"\| \d{{3}} \| `{code}` \|", API_DOC), code


def test_every_session_status_is_documented():
    for status in selectors.STATUSES:
        assert f"| `{status}` |" in LOG_DOC, status
        assert f"`{status}`" in API_DOC, status


def test_every_websocket_close_code_is_documented():
    codes = {value for name, value in vars(consumers).items() if name.startswith("CLOSE_")}
    assert {4400, 4401, 4403, 4404} <= codes
    for code in codes:
        assert f"| `{code}` |" in API_DOC, code


def test_the_readme_links_only_to_files_in_the_repository():
    readme = (ROOT / "README.md").read_text()
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", readme)
    assert "docs/session-log.md" in links and "docs/api.md" in links
    for link in links:
        if "://" not in link:
            target = (ROOT / link).resolve()
            assert target.is_relative_to(ROOT) and target.exists(), link


def test_the_openapi_description_points_to_the_docs():
    description = api.get_openapi_schema()["info"]["description"]
    assert "docs/session-log.md" in description and "docs/api.md" in description


def markdown_table(doc: str, header: str) -> list[list[str]]:
    """The rows (cells stripped) of the table whose header line is `header`."""
    lines = doc.split("\n")
    start = lines.index(header) + 2  # past the header and its --- line
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def test_the_roles_table_is_what_access_grants():
    capabilities = [access.READ, access.APPEND, access.FORK, access.RECOVER, access.ADMIN]
    rows = markdown_table(API_DOC, "| role | " + " | ".join(capabilities) + " |")
    documented = {row[0]: {cap for cap, cell in zip(capabilities, row[1:], strict=True) if cell == "yes"} for row in rows}
    assert all(cell in {"yes", "no"} for row in rows for cell in row[1:])
    assert documented == {f"`{role}`": set(granted) for role, granted in access.ROLE_CAPABILITIES.items()}
    assert set(access.ROLE_CAPABILITIES) == set(Role.values)


def test_every_token_scope_is_documented():
    rows = markdown_table(API_DOC, "| scope | lets the token |")
    assert [row[0] for row in rows] == [f"`{scope}`" for scope in Scope.values]


def test_every_audit_action_is_documented():
    rows = markdown_table(API_DOC, "| action | recorded when | target | details |")
    assert [row[0] for row in rows] == [f"`{action}`" for action, _ in AuditEntry.ACTIONS]


def test_every_environment_setting_is_in_the_readme():
    settings_source = (ROOT / "dashboard" / "settings.py").read_text()
    names = set(re.findall(r'(?:environ\.get|env_flag)\(\s*"([A-Z0-9_]+)"', settings_source))
    assert {"DATABASE_URL", "TURNLOG_STALL_SECONDS", "DJANGO_DEBUG"} <= names
    readme = (ROOT / "README.md").read_text()
    for name in names:
        assert f"| `{name}` |" in readme, name


def test_every_environment_setting_is_in_the_deployment_table():
    """docs/deploy.md says what to set each variable to behind nginx, and lists every one."""
    settings_source = (ROOT / "dashboard" / "settings.py").read_text()
    names = set(re.findall(r'(?:environ\.get|env_flag)\(\s*"([A-Z0-9_]+)"', settings_source))
    rows = markdown_table((ROOT / "docs" / "deploy.md").read_text(), "| variable | set it to, behind nginx | what it is |")
    documented = [row[0] for row in rows]
    assert len(documented) == len(set(documented))
    assert set(documented) == {f"`{name}`" for name in names | {"PROMETHEUS_MULTIPROC_DIR"}}


def heading_anchors(doc: str) -> set[str]:
    """The anchors GitHub gives the headings, and the explicit <a id>s."""
    headings = re.findall(r"^#+ (.+)$", doc, flags=re.MULTILINE)
    slugs = {re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-") for heading in headings}
    return slugs | set(re.findall(r'<a id="([^"]+)"></a>', doc))


def test_every_link_into_the_docs_names_an_anchor_that_exists():
    docs = {name: (ROOT / name).read_text() for name in ["README.md", "docs/api.md", "docs/session-log.md"]}
    checked = 0
    for name, text in docs.items():
        for target, anchor in re.findall(r"\]\(([^)#\s]*)#([^)\s]+)\)", text):
            linked = name if not target else str((Path(name).parent / target)).removeprefix("./")
            if linked in docs:
                assert anchor in heading_anchors(docs[linked]), f"{name}: {target}#{anchor}"
                checked += 1
    assert checked > 10


def test_every_command_option_is_in_a_documented_usage_line():
    """Each subcommand of the operators' commands has a usage line (README or api.md) naming all its options."""
    lines = [line for name in ["README.md", "docs/api.md"] for line in (ROOT / name).read_text().split("\n")]
    usages = {}
    for command in ["sessions", "projects", "tokens", "create_token"]:
        parser = load_command_class("sessions_app", command).create_parser("manage.py", command)
        subcommands = [action for action in parser._actions if isinstance(action, argparse._SubParsersAction)]
        if subcommands:
            usages |= {f"manage.py {command} {name}": sub for name, sub in subcommands[0].choices.items()}
        else:
            usages[f"manage.py {command} "] = parser
    assert "manage.py tokens revoke" in usages and "manage.py projects add-member" in usages
    for usage, parser in usages.items():
        options = {
            option
            for action in parser._actions
            for option in action.option_strings
            if option.startswith("--") and option not in COMMON_OPTIONS
        }
        documented = [line for line in lines if usage in line and all(option in line for option in options)]
        assert documented, (usage, sorted(options))


def test_every_documented_way_of_starting_daphne_gives_it_the_websocket_limit():
    """Daphne's own default (1 MiB) fails any larger frame: the guides start it as `turnlog daphne`, which passes
    TURNLOG_WS_MAX_MESSAGE_BYTES (or with the options themselves); `make run`'s runserver reads it from the settings."""
    for doc in ("README.md", "docs/deploy.md"):
        for line in (ROOT / doc).read_text().splitlines():
            if re.search(r"\bdaphne\b[^`]*dashboard\.asgi:application", line):
                assert "--websocket-max-message-size" in line, (doc, line)
    assert "ExecStart=/srv/turnlog/.venv/bin/turnlog daphne -b 127.0.0.1 -p %i" in (ROOT / "docs" / "deploy.md").read_text()
    assert "manage.py runserver $(HOST):$(PORT)" in (ROOT / "Makefile").read_text()
    assert settings.DAPHNE_WEBSOCKET_MAX_MESSAGE_SIZE == settings.DAPHNE_WEBSOCKET_MAX_FRAME_SIZE == settings.TURNLOG_WS_MAX_MESSAGE_BYTES
