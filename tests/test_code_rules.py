"""Two rules of the code that are not about imports (those are import-linter's contracts,
tests/test_layer_contracts.py): pages and live code read through selectors, and no module
grows past 450 lines unless the internals page says why."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("sessions_app", "dashboard", "turnlog_client")
# Rooms that read through sessions_app.selectors only: no `Model.objects` of their own.
READ_THROUGH_SELECTORS = ("dashboard.pages", "dashboard.live", "dashboard.templatetags")
MAX_LINES = 450
ARCHITECTURE = ROOT / "docs" / "internals" / "architecture.md"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def product_modules() -> dict[str, Path]:
    return {
        module_name(path): path
        for package in PRODUCT
        for path in (ROOT / package).rglob("*.py")
        if "migrations" not in path.parts and "tests" not in path.relative_to(ROOT).parts
    }


def manager_queries(sources: dict[str, str]) -> list[str]:
    """Every model manager (an `.objects` attribute) that a module of READ_THROUGH_SELECTORS touches."""
    found = []
    for module, source in sources.items():
        if any(module == room or module.startswith(room + ".") for room in READ_THROUGH_SELECTORS):
            found += [
                f"{module}:{node.lineno} queries {ast.unparse(node)}; read through sessions_app.selectors"
                for node in ast.walk(ast.parse(source))
                if isinstance(node, ast.Attribute) and node.attr == "objects"
            ]
    return sorted(found)


def oversized(line_counts: dict[str, int], doc: str) -> list[str]:
    """Modules over MAX_LINES that the internals page does not justify (a bullet naming the path)."""
    section = doc.split("## Modules over 450 lines", 1)[1].split("\n## ", 1)[0]
    return sorted(path for path, count in line_counts.items() if count > MAX_LINES and f"- `{path}`" not in section)


def test_pages_and_live_code_query_no_model_manager_themselves():
    assert manager_queries({name: path.read_text() for name, path in product_modules().items()}) == []


@pytest.mark.parametrize("module", ["dashboard.pages.transcript", "dashboard.live.sessions", "dashboard.templatetags.turnlog"])
def test_the_manager_check_refuses_a_query_in_pages_or_live_code(module):
    assert manager_queries({module: "Session.objects.get(pk=1)"}) != []


def test_the_manager_check_leaves_the_reads_alone():
    assert manager_queries({"sessions_app.selectors.transcript": "Session.objects.get(pk=1)"}) == []


def test_no_module_is_over_450_lines_without_a_reason_in_the_docs():
    counts = {str(path.relative_to(ROOT)): len(path.read_text().splitlines()) for path in product_modules().values()}
    assert oversized(counts, ARCHITECTURE.read_text()) == []


def test_the_size_check_refuses_a_long_module_unless_the_docs_say_why():
    doc = "## Modules over 450 lines\n\n- `dashboard/pages/long.py`: a reason.\n\n## Tests\n- `sessions_app/long.py`\n"
    counts = {"dashboard/pages/long.py": 600, "sessions_app/long.py": 451, "sessions_app/short.py": 450}
    assert oversized(counts, doc) == ["sessions_app/long.py"]
