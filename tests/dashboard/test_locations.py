"""Where Turnlog reads templates and static files and writes its data: the source tree's own places, or a wheel's."""

import os
import subprocess
import sys
from pathlib import Path

from dashboard import locations
from tests.servers import PROJECT_DIR

HOME = Path("/home/ada")


def test_the_source_tree_writes_under_var_and_reads_its_own_templates():
    assert not locations.installed()  # setup.py's copies exist in wheels only, never in the repository
    assert locations.data_dir("", installed=False) == PROJECT_DIR / "var"
    assert locations.site_files_dir() == PROJECT_DIR


def test_turnlog_data_dir_wins_wherever_it_runs(tmp_path: Path):
    assert locations.data_dir(str(tmp_path / "data"), installed=False) == tmp_path / "data"
    assert locations.data_dir(str(tmp_path / "data"), installed=True) == tmp_path / "data"
    assert locations.data_dir("~/turnlog-data", installed=True) == Path.home() / "turnlog-data"


def test_an_installed_package_writes_under_the_platforms_data_directory():
    assert locations.user_data_dir("linux", {}, HOME) == HOME / ".local/share/turnlog"
    assert locations.user_data_dir("linux", {"XDG_DATA_HOME": "/srv/xdg"}, HOME) == Path("/srv/xdg/turnlog")
    assert locations.user_data_dir("linux", {"XDG_DATA_HOME": "relative"}, HOME) == HOME / ".local/share/turnlog"
    assert locations.user_data_dir("darwin", {}, HOME) == HOME / "Library/Application Support/turnlog"
    assert locations.user_data_dir("win32", {"LOCALAPPDATA": "C:/Users/ada/AppData/Local"}, HOME) == Path(
        "C:/Users/ada/AppData/Local/turnlog"
    )


def test_settings_put_the_database_and_the_key_under_turnlog_data_dir(tmp_path: Path):
    data = tmp_path / "data"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "TURNLOG_", "DATABASE_URL"))}
    shown = subprocess.run(
        [sys.executable, "manage.py", "shell", "-v", "0", "-c",
         "from django.conf import settings as s; print(s.DATABASES['default']['NAME']); print(s.SECRET_KEY)"],
        cwd=PROJECT_DIR, env={**env, "TURNLOG_DATA_DIR": str(data)}, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    database, key = shown.stdout.split()
    assert Path(database) == data / "turnlog.sqlite3"
    assert key == (data / "secret_key").read_text().strip()
    assert (data.stat().st_mode & 0o777) == 0o700  # it holds the key and the database
