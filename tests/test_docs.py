"""The user documentation stays in step with the code: every endpoint, error code,
status and websocket close code the code has is documented, and the README's links resolve."""

import re
from pathlib import Path

from django.conf import settings

from dashboard import consumers
from sessions_app import selectors
from sessions_app.api import api

ROOT = Path(settings.BASE_DIR)
API_DOC = (ROOT / "docs" / "api.md").read_text()
LOG_DOC = (ROOT / "docs" / "session-log.md").read_text()


def test_every_endpoint_is_documented():
    for path, operations in api.get_openapi_schema()["paths"].items():
        documented = path.replace("{session_id}", "{id}")
        for method in operations:
            assert f"`{method.upper()} {documented}`" in API_DOC, (method, path)


def test_every_error_code_the_api_answers_with_is_documented():
    source = "\n".join(
        (ROOT / name).read_text()
        for name in ["sessions_app/api.py", "sessions_app/log/fork.py", "sessions_app/log/values.py", "dashboard/middleware.py"]
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
