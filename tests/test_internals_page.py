"""The internals page (docs/internals/architecture.md) maps the whole tree: every folder of the
product and every top-level folder appears there by its path, so a new folder is placed on the
map when it is made."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "internals" / "architecture.md"
PRODUCT = ("sessions_app", "dashboard", "turnlog_client")
TOP_LEVEL = ("bench", "deploy", "docs", "static", "templates", "tests")


def folders() -> list[str]:
    found = [f"{name}/" for name in (*PRODUCT, *TOP_LEVEL)]
    for package in PRODUCT:
        for path in sorted((ROOT / package).rglob("*")):
            if path.is_dir() and path.name != "__pycache__" and any(path.glob("*.py")):
                found.append(f"{path.relative_to(ROOT).as_posix()}/")
    return found


def unmapped(page: str, paths: list[str]) -> list[str]:
    """The folders the page does not name, in backquotes, by their path (or, under a folder it names, by
    their path from there)."""
    return [path for path in paths if f"`{path}`" not in page and f"`{path.split('/', 1)[1]}`" not in page]


def test_every_folder_of_the_tree_appears_on_the_internals_page():
    assert unmapped(PAGE.read_text(), folders()) == []


def test_a_folder_the_page_does_not_name_is_found():
    page = "`sessions_app/` holds `services/` and `selectors/`."
    assert unmapped(page, ["sessions_app/", "sessions_app/services/", "sessions_app/lib/"]) == ["sessions_app/lib/"]
