"""The user documentation stays in step with the code: every endpoint, error code, status, websocket close
code, setting, command option and benchmark the code has is documented, the README's tour runs as written, and
every relative link and anchor in the documents resolves."""

import argparse
import io
import json
import re
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import call_command, load_command_class

from dashboard.live import consumers
from sessions_app import selectors
from sessions_app.api.app import api
from sessions_app.models import AuditEntry, Role, Scope
from sessions_app.selectors import access
from tests.access import token_for
from tests.conftest import ApiClient

ROOT = Path(settings.BASE_DIR)
API_DOC = (ROOT / "docs" / "api.md").read_text()
# Django's own options of every command (--verbosity, --settings ...), documented by Django.
COMMON_OPTIONS = {
    "--help", "--version", "--verbosity", "--settings", "--pythonpath", "--traceback", "--no-color", "--force-color", "--skip-checks"
}
LOG_DOC = (ROOT / "docs" / "session-log.md").read_text()
# Every document: the README, the changelog, the contributors' guide and everything under docs/.
DOCUMENTS = ["README.md", "CHANGELOG.md", "CONTRIBUTING.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").rglob("*.md"))]
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
    # The error table's rows (api/errors.py), the answers written out below it, and the domain's own refusals.
    codes = set(re.findall(r'(?:ApiError\(\d+|Refusal\(\d+|error_response\(api, request, \d+|ForkRefused\()\s*,?\s*"([a-z_]+)"', source))
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


def test_every_environment_setting_is_on_the_settings_page():
    settings_source = (ROOT / "dashboard" / "settings.py").read_text()
    names = set(re.findall(r'(?:environ\.get|env_flag)\(\s*"([A-Z0-9_]+)"', settings_source))
    assert {"DATABASE_URL", "TURNLOG_STALL_SECONDS", "DJANGO_DEBUG"} <= names
    page = (ROOT / "docs" / "settings.md").read_text()
    for name in names:
        assert f"| `{name}` |" in page, name


def test_every_environment_setting_is_in_the_deployment_table():
    """docs/guide/deploy.md says what to set each variable to behind nginx, and lists every one."""
    settings_source = (ROOT / "dashboard" / "settings.py").read_text()
    names = set(re.findall(r'(?:environ\.get|env_flag)\(\s*"([A-Z0-9_]+)"', settings_source))
    rows = markdown_table((ROOT / "docs" / "guide" / "deploy.md").read_text(), "| variable | set it to, behind nginx | what it is |")
    documented = [row[0] for row in rows]
    assert len(documented) == len(set(documented))
    assert set(documented) == {f"`{name}`" for name in names | {"PROMETHEUS_MULTIPROC_DIR"}}


# Code blocks are not prose: a `# comment` in one is no heading, a `[x](y)` in one no link.
FENCE = re.compile(r"^ {0,3}(```|~~~).*?^ {0,3}\1[^\n]*$", flags=re.MULTILINE | re.DOTALL)
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(([^)\s]*)\)")


def prose(doc: str) -> str:
    return FENCE.sub("", doc)


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: its text (a link's words, no markup) lowered, punctuation dropped, spaces hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip())
    return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


def heading_anchors(doc: str) -> set[str]:
    """The anchors GitHub gives the headings (a repeated one gets -1, -2 ...), and the explicit <a id>s."""
    anchors, seen = set(), {}
    for heading in re.findall(r"^#{1,6} (.+)$", prose(doc), flags=re.MULTILINE):
        slug = github_slug(heading)
        anchors.add(f"{slug}-{seen[slug]}" if slug in seen else slug)
        seen[slug] = seen.get(slug, 0) + 1
    return anchors | set(re.findall(r'<a id="([^"]+)"></a>', doc))


def broken_links(texts: dict[str, str]) -> tuple[list[str], int]:
    """Each relative link (and #anchor) of the documents `texts` (path -> text) that does not resolve inside the
    repository, and how many anchors were checked. A linked file is read from `texts`, else from the disk."""
    broken, anchors = [], 0
    for name, text in texts.items():
        for link in LINK.findall(prose(text)):
            if re.match(r"[a-z][a-z0-9+.-]*:", link):  # https:, mailto: ...
                continue
            path, _, anchor = link.partition("#")
            target = ((ROOT / name).parent / path).resolve() if path else (ROOT / name)
            linked = str(target.relative_to(ROOT)) if target.is_relative_to(ROOT) else None
            if linked is None or (linked not in texts and not target.exists()):
                broken.append(f"{name}: {link}")
            elif anchor:
                anchors += 1
                if not linked.endswith(".md"):
                    broken.append(f"{name}: {link} (an anchor into a file that is not markdown)")
                elif anchor not in heading_anchors(texts.get(linked) or target.read_text()):
                    broken.append(f"{name}: {link} (no such heading)")
    return broken, anchors


def test_every_relative_link_and_anchor_in_the_documents_resolves():
    assert {"README.md", "CHANGELOG.md", "CONTRIBUTING.md", "docs/README.md", "docs/api.md"} <= set(DOCUMENTS)
    broken, anchors = broken_links({name: (ROOT / name).read_text() for name in DOCUMENTS})
    assert broken == []
    assert anchors > 50


def test_the_link_check_finds_a_missing_file_a_missing_heading_and_a_link_out_of_the_repository():
    texts = {
        "docs/a.md": "# A page\n\n## Its part: one\n\n## Its part: one\n\n```sh\n# not a heading\n[no](link.md)\n```\n",
        "docs/b.md": (
            "[ok](a.md#its-part-one) [ok](a.md#its-part-one-1) [ok](#b) [ok](../README.md) [web](https://example.com/x)\n"
            "# B\n[gone](c.md) [no heading](a.md#not-a-heading) [out](../../etc/passwd) [not md](../Makefile#x)\n"
        ),
    }
    broken, anchors = broken_links(texts)
    assert broken == [
        "docs/b.md: c.md",
        "docs/b.md: a.md#not-a-heading (no such heading)",
        "docs/b.md: ../../etc/passwd",
        "docs/b.md: ../Makefile#x (an anchor into a file that is not markdown)",
    ]
    assert anchors == 5
    assert github_slug("6. Recovery") == "6-recovery"
    assert github_slug("`sessions_app/log/`: the log's semantics") == "sessions_applog-the-logs-semantics"
    assert github_slug("[Keep](https://x) a Changelog") == "keep-a-changelog"


def test_no_document_is_a_dated_log_or_names_an_issue():
    for name in DOCUMENTS:
        text = (ROOT / name).read_text()
        assert not re.search(r"\bissues? #?\d+", text, flags=re.IGNORECASE), name
        assert not re.search(r"^#+ .*\b20\d\d-\d\d-\d\d", prose(text), flags=re.MULTILINE), name


def test_the_readme_is_short_and_shows_one_screenshot_of_those_the_guide_shows():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 150
    assert readme.startswith("# Turnlog\n\n```sh\nmake run    #") and "\nmake test   #" in readme[:300]
    (image,) = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", readme)
    assert re.fullmatch(r"docs/images/screenshot-[a-z]+\.png", image)
    # Each screenshot is shown on the guide page of what it shows.
    guide = "\n".join(path.read_text() for path in (ROOT / "docs" / "guide").glob("*.md"))
    shots = sorted(path.name for path in (ROOT / "docs" / "images").glob("*.png"))
    assert len(shots) >= 5
    for shot in shots:
        assert f"](../images/{shot})" in guide, shot


def test_every_benchmark_has_its_section_on_the_performance_page():
    page = (ROOT / "docs" / "performance.md").read_text()
    scripts = sorted(path.name for path in (ROOT / "bench").glob("*.py"))
    assert {"ingest.py", "live.py", "otlp.py", "_common.py"} <= set(scripts)
    for script in scripts:
        assert f"`bench/{script}`" in page, script


def tour_requests(readme: str) -> list[tuple[str, dict]]:
    """The README tour's curl requests, as (path, JSON body)."""
    tour = readme.split("## A five-minute tour\n", 1)[1].split("\n## ", 1)[0]
    (script,) = re.findall(r"```sh\n(.*?)```", tour, flags=re.DOTALL)
    assert "TOKEN=$(.venv/bin/python manage.py create_token my-agent | tail -n 1)" in script
    api = re.search(r"^API=http://127\.0\.0\.1:8000(/\S+)$", script, flags=re.MULTILINE).group(1)
    return [(api + path, json.loads(body)) for body, path in re.findall(r"-d '([^']*)'\s*(?:\\\s*)?\$API(\S+)", script)]


@pytest.mark.django_db
def test_the_readme_tour_leaves_the_crashed_turn_it_describes_and_its_recovery_appends_the_preview(django_user_model):
    readme = (ROOT / "README.md").read_text()
    tour = readme.split("## A five-minute tour\n", 1)[1].split("\n## ", 1)[0]
    assert all(words in tour for words in ["`manual_check`", "`tool_outcome_unknown`", "rule 1", "a synthetic result for `call_1` and the turn's end"])
    printed = io.StringIO()
    call_command("create_token", "my-agent", stdout=printed)
    agent = ApiClient(printed.getvalue().strip().splitlines()[-1])
    requests = tour_requests(readme)
    assert [path for path, _ in requests] == ["/api/v1/sessions", "/api/v1/sessions/tour-1/events"]
    for path, body in requests:
        assert agent.post(path, body).status_code == 201, path
    plan = agent.get("/api/v1/sessions/tour-1/recovery-plan").json()
    assert plan["interrupted"] is True
    assert [(c["id"], c["name"], c["risk"], c["rule"]) for c in plan["owed_calls"]] == [("call_1", "charge_card", "tool_outcome_unknown", 1)]
    assert [s["strategy"] for s in plan["strategies"]] == ["manual_check"]
    assert [(r["type"], r["data"].get("tool_call_id")) for r in plan["repairs"]] == [("tool_result", "call_1"), ("turn_end", None)]
    operator = ApiClient(token_for(django_user_model.objects.create_user("ops"), Role.OPERATOR))
    recovered = operator.post("/api/v1/sessions/tour-1/recover", {"digest": plan["digest"]})
    assert recovered.status_code == 200
    appended = recovered.json()["appended"]
    assert [(e["type"], e["data"]) for e in appended] == [(r["type"], r["data"]) for r in plan["repairs"]]
    assert appended[-1]["data"]["reason"] == "interrupted"


def test_every_command_option_is_in_a_documented_usage_line():
    """Each subcommand of the operators' commands has a usage line (the command-line guide or api.md) naming all its options."""
    lines = [line for name in ["docs/guide/command-line.md", "docs/api.md"] for line in (ROOT / name).read_text().split("\n")]
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
    for doc in DOCUMENTS:
        for line in (ROOT / doc).read_text().splitlines():
            if re.search(r"\bdaphne\b[^`]*dashboard\.asgi:application", line):
                assert "--websocket-max-message-size" in line, (doc, line)
    assert "ExecStart=/opt/turnlog/venv/bin/turnlog daphne -b 127.0.0.1 -p %i" in (ROOT / "deploy" / "systemd" / "turnlog-daphne@.service").read_text()
    assert "manage.py runserver $(HOST):$(PORT)" in (ROOT / "Makefile").read_text()
    assert settings.DAPHNE_WEBSOCKET_MAX_MESSAGE_SIZE == settings.DAPHNE_WEBSOCKET_MAX_FRAME_SIZE == settings.TURNLOG_WS_MAX_MESSAGE_BYTES


# A wheel's copy of templates/ and static/, made when the package is built (setup.py).
BUILT = {"dashboard/bundled/"}


def missing_paths(text: str) -> list[str]:
    """The repository paths a document names in backquotes that are not in the tree."""
    named = re.findall(r"`((?:sessions_app|dashboard|turnlog_client|tests|bench|deploy|templates|static)/[\w/.\-]*)`", text)
    return [path for path in named if not path.endswith("...") and path not in BUILT and not (ROOT / path).exists()]


def test_every_path_a_document_names_is_in_the_tree():
    for name in DOCUMENTS:
        assert missing_paths((ROOT / name).read_text()) == [], name


def test_the_path_check_finds_a_moved_module():
    assert missing_paths("See `sessions_app/services/appends.py` and `sessions_app/errors.py`.") == ["sessions_app/errors.py"]
