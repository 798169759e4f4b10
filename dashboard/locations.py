"""Where Turnlog reads its templates and static files, and where it writes at runtime.

From the source tree (`make run`, `make test`, an editable install) both are the repository's own:
templates/ and static/ at its root, and var/ for what it writes. Installed from a wheel, the package
carries copies of templates/ and static/ in dashboard/bundled/ (setup.py's build step puts them there)
and writes under a per-user data directory instead of site-packages. TURNLOG_DATA_DIR overrides either.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

SOURCE_TREE = Path(__file__).resolve().parent.parent
BUNDLED = Path(__file__).resolve().parent / "bundled"


def installed() -> bool:
    """True when this is a wheel's copy of the package rather than the source tree."""
    return BUNDLED.is_dir()


def site_files_dir() -> Path:
    """The directory holding templates/ and static/."""
    return BUNDLED if installed() else SOURCE_TREE


def data_dir(configured: str, *, installed: bool) -> Path:
    """The directory for the SQLite database, the development secret key and other runtime files:
    TURNLOG_DATA_DIR (`configured`) if set, else var/ in the source tree, else the user's data directory."""
    if configured.strip():
        return Path(configured.strip()).expanduser().absolute()
    if not installed:
        return SOURCE_TREE / "var"
    return user_data_dir(sys.platform, os.environ, Path.home())


def user_data_dir(platform: str, environ: Mapping[str, str], home: Path) -> Path:
    """The platform's place for an application's data: XDG on Linux and BSDs, Application Support
    on macOS, %LOCALAPPDATA% on Windows (what platformdirs answers, without the dependency)."""
    if platform == "darwin":
        return home / "Library" / "Application Support" / "turnlog"
    if platform == "win32":
        return Path(environ.get("LOCALAPPDATA") or home / "AppData" / "Local") / "turnlog"
    xdg = environ.get("XDG_DATA_HOME", "")
    # The XDG spec ignores a relative XDG_DATA_HOME.
    return (Path(xdg) if os.path.isabs(xdg) else home / ".local" / "share") / "turnlog"
