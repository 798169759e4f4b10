"""The layers (docs/internals/architecture.md) as import-linter contracts (pyproject.toml's
[tool.importlinter]): the tree keeps them, and each contract refuses the import it exists to catch.

A refused import is tried on a copy of the product's packages, so the tree itself is never touched.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("sessions_app", "dashboard", "turnlog_client")
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_imports(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"], cwd=root, capture_output=True, text=True, timeout=120,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(root)},
    )


def test_the_tree_keeps_every_contract():
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.fixture(scope="module")
def copy_of_the_tree(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("tree")
    shutil.copy(ROOT / "pyproject.toml", root)
    for package in PACKAGES:
        shutil.copytree(ROOT / package, root / package, ignore=shutil.ignore_patterns("__pycache__"))
    return root


@pytest.mark.parametrize(
    "module, wrong_import, contract",
    [
        ("sessions_app/log/fold.py", "import django.db", "The pure core"),
        ("sessions_app/otel/planner.py", "from sessions_app.models import Session", "The pure core"),
        ("sessions_app/models/notes.py", "from sessions_app.services import appends", "imports only go down"),
        ("sessions_app/selectors/events.py", "from sessions_app.services import event_rows", "imports only go down"),
        ("sessions_app/lib/wording.py", "from sessions_app import models", "imports only go down"),
        ("sessions_app/services/forks.py", "from dashboard.pages import transcript", "never imports the site"),
        ("sessions_app/worker.py", "import turnlog_client", "never imports the site"),
        ("dashboard/pages/transcript.py", "from dashboard.live import frames", "the live side above the pages"),
        ("dashboard/live/stream.py", "from dashboard import middleware", "the live side above the pages"),
        ("dashboard/pages/sessions.py", "from sessions_app.api import app", "never through the server's doors"),
        ("dashboard/live/stream.py", "import turnlog_client", "The site never imports the client"),
        ("turnlog_client/stream.py", "from sessions_app.log import events", "The client imports nothing of the server"),
        ("sessions_app/services/event_rows.py", "from sessions_app.services import appends", "No import circles"),
    ],
)
def test_each_contract_refuses_the_import_it_exists_to_catch(copy_of_the_tree, module, wrong_import, contract):
    path = copy_of_the_tree / module
    kept = path.read_text()
    # Inside a function: a lazy import is still a dependency.
    path.write_text(kept + f"\n\ndef _wrong():\n    {wrong_import}\n")
    try:
        result = lint_imports(copy_of_the_tree)
    finally:
        path.write_text(kept)
    assert result.returncode != 0, result.stdout
    broken = " ".join(result.stdout.split("Broken contracts", 1)[-1].split())  # the report wraps long names
    assert contract in broken, result.stdout


def test_a_module_outside_every_layer_is_refused(copy_of_the_tree):
    stray = copy_of_the_tree / "sessions_app" / "stray.py"
    stray.write_text('"""A module in no layer."""\n')
    try:
        result = lint_imports(copy_of_the_tree)
    finally:
        stray.unlink()
    assert result.returncode != 0 and "sessions_app.stray" in result.stdout, result.stdout
