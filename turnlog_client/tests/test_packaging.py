"""The client stands alone: it imports without Django, and builds as a wheel of its own (turnlog_client/pyproject.toml)
that holds the package, its py.typed and nothing of the server, and needs only httpx and websockets."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from turnlog_client.tests.conftest import ROOT

# A finder first on sys.meta_path that makes Django (and the server's packages) impossible to import.
WITHOUT_THE_SERVER = """
import importlib, pkgutil, sys

class Blocked:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {"django", "sessions_app", "dashboard", "tests", "channels", "ninja"}:
            raise ImportError(f"{name} is blocked: the client must not need it")
        return None

sys.meta_path.insert(0, Blocked())
sys.path.insert(0, sys.argv[1])
import turnlog_client
modules = [m.name for m in pkgutil.iter_modules(turnlog_client.__path__, "turnlog_client.") if m.name != "turnlog_client.tests"]
for name in modules:
    importlib.import_module(name)
assert not any(name.split(".")[0] == "django" for name in sys.modules)
print(turnlog_client.__file__, len(modules))
"""


def import_without_the_server(path: Path) -> str:
    done = subprocess.run([sys.executable, "-c", WITHOUT_THE_SERVER, str(path)], cwd=path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_client_imports_without_django():
    where, count = import_without_the_server(ROOT).split()
    assert Path(where).parent == ROOT / "turnlog_client" and int(count) >= 8


def test_the_client_builds_as_a_wheel_of_its_own(tmp_path):
    source = tmp_path / "turnlog_client"  # a copy: the build writes nothing into the repository
    shutil.copytree(ROOT / "turnlog_client", source, ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--wheel-dir", str(tmp_path / "dist"), str(source)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    (wheel,) = (tmp_path / "dist").glob("turnlog_client-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = archive.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
        archive.extractall(tmp_path / "installed")
    assert "turnlog_client/py.typed" in names and "turnlog_client/writer.py" in names
    assert not [n for n in names if "/tests/" in n or n.endswith("pyproject.toml")]
    requirements = sorted(line.split(":", 1)[1].strip() for line in metadata.splitlines() if line.startswith("Requires-Dist:"))
    # httpx and websockets alone; the OpenAI Agents SDK only with the `agents` extra, Pydantic AI with `pydantic-ai`,
    # OpenTelemetry's SDK with `otel`.
    assert [r for r in requirements if "extra ==" not in r] == ["httpx<1,>=0.28", "websockets<18,>=15"]
    assert [r for r in requirements if "extra ==" in r] == [
        'openai-agents<0.25,>=0.24; extra == "agents"', 'opentelemetry-sdk<2,>=1.39; extra == "otel"',
        'pydantic-ai-slim<3,>=2.68; extra == "pydantic-ai"',
    ]
    where, _ = import_without_the_server(tmp_path / "installed").split()
    assert Path(where).parent == tmp_path / "installed" / "turnlog_client"
