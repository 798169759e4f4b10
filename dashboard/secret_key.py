"""The development secret key: generated once, kept in a file under TURNLOG_DATA_DIR (var/ in the source tree), never written in the code."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from django.core.management.utils import get_random_secret_key


def development_secret_key(path: Path) -> str:
    """The key stored at path, created (mode 0600) on first use.

    Several processes may start at once (test runs, the Daphne they spawn):
    each writes a complete key to its own temporary file and links it into
    place; os.link never replaces an existing file, so every process reads
    the one key that won.
    """
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        pass
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)  # private: the key, and the database beside it
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=".secret_key.")  # mode 0600
    try:
        with os.fdopen(descriptor, "w") as file:
            file.write(get_random_secret_key() + "\n")
        try:
            os.link(temporary, path)
        except FileExistsError:
            pass
    finally:
        os.unlink(temporary)
    return path.read_text().strip()
