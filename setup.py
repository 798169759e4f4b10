"""The wheel carries the site's templates/ and static/, which stay at the repository's root for the
source tree, as dashboard/bundled/ (dashboard/locations.py serves them from there). Everything else
is declared in pyproject.toml."""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

SITE_FILES = ("templates", "static")


class BuildPyWithSiteFiles(build_py):
    def run(self):
        super().run()
        # An editable install serves the repository's own directories: nothing to copy.
        if self.dry_run or getattr(self, "editable_mode", False):
            return
        for name in SITE_FILES:
            target = Path(self.build_lib) / "dashboard" / "bundled" / name
            shutil.rmtree(target, ignore_errors=True)  # build/ outlives builds: no stale file may ship
            shutil.copytree(Path(__file__).parent / name, target)


setup(cmdclass={"build_py": BuildPyWithSiteFiles})
