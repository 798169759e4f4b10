"""The configuration file: `TURNLOG_CONFIG` if set, else /etc/turnlog.env if it exists, read by `turnlog` and
`manage.py` before the settings are imported. The process environment wins over it.

Parsed as systemd parses `EnvironmentFile=` (its parse_env_file), so that the units and the commands an operator
runs by hand read the same settings from the same file:

- `KEY=VALUE`, one a line; whitespace around the key and before the value is dropped, and so is trailing
  whitespace of an unquoted value. A line with no `=` is ignored.
- A line whose first character other than whitespace is `#` or `;` is a comment. There are no comments after a
  value: `A=1 # one` sets A to `1 # one`.
- `"..."` keeps everything inside; a backslash escapes `"`, `\\`, `` ` `` and `$` (and a newline, which is
  dropped), and stays as it is before any other character. `'...'` keeps everything inside, backslashes too.
  Quoted and unquoted parts run together: `A="x y"z` is `x yz`.
- Unquoted, a backslash keeps the next character as it is (`\\#`), and a backslash at the end of a line joins
  the next line to it.
- No `export`, no `$VAR` expansion. A name that is not letters, digits and `_` (not starting with a digit) is
  ignored, as systemd ignores it; `turnlog check` reports it.
"""

from __future__ import annotations

import os
import re
from collections.abc import MutableMapping
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_PATH = Path("/etc/turnlog.env")
VARIABLE = "TURNLOG_CONFIG"
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
NEWLINE = "\n\r"
WHITESPACE = " \t\n\r"


class ConfigFileError(Exception):
    """The configuration file named cannot be read."""


@dataclass
class Assignment:
    name: str
    value: str
    line: int


@dataclass
class ParsedFile:
    assignments: list[Assignment] = field(default_factory=list)
    invalid: list[Assignment] = field(default_factory=list)  # names systemd would refuse (and ignore)

    def values(self) -> dict[str, str]:
        """The file's settings, a later line for the same name winning as in systemd."""
        return {a.name: a.value for a in self.assignments}


@dataclass
class LoadedConfig:
    path: Path | None  # None: no file read
    values: dict[str, str] = field(default_factory=dict)  # what the file sets
    overridden: list[str] = field(default_factory=list)  # names the process environment also sets, so wins
    invalid: list[Assignment] = field(default_factory=list)


def parse(text: str) -> ParsedFile:
    """The assignments of an `EnvironmentFile=` text (the module's docstring says what is accepted)."""
    parsed = ParsedFile()
    text = text.removeprefix("\ufeff")
    state, key, value, line, start = "pre_key", [], [], 1, 1
    key_ws = value_ws = None  # where trailing whitespace of the key / the unquoted value starts

    def push() -> None:
        name = "".join(key if key_ws is None else key[:key_ws])
        assignment = Assignment(name, "".join(value), start)
        (parsed.assignments if NAME.match(name) else parsed.invalid).append(assignment)

    for c in text:
        if state == "pre_key":
            if c in "#;":
                state = "comment"
            elif c not in WHITESPACE:
                state, key, key_ws, start = "key", [c], None, line
        elif state == "key":
            if c in NEWLINE:
                state = "pre_key"  # no `=`: ignored
            elif c == "=":
                state, value, value_ws = "pre_value", [], None
            else:
                if c in WHITESPACE:
                    key_ws = len(key) if key_ws is None else key_ws
                else:
                    key_ws = None
                key.append(c)
        elif state == "pre_value":
            if c in NEWLINE:
                state = "pre_key"
                push()
            elif c == "'":
                state = "single"
            elif c == '"':
                state = "double"
            elif c == "\\":
                state = "value_escape"
            elif c not in WHITESPACE:
                state = "value"
                value.append(c)
        elif state == "value":
            if c in NEWLINE:
                state = "pre_key"
                if value_ws is not None:
                    del value[value_ws:]
                push()
            elif c == "\\":
                state, value_ws = "value_escape", None
            else:
                if c not in WHITESPACE:
                    value_ws = None
                elif value_ws is None:
                    value_ws = len(value)
                value.append(c)
        elif state == "value_escape":
            state = "value"
            if c not in NEWLINE:
                value.append(c)
        elif state == "single":
            if c == "'":
                state = "pre_value"
            else:
                value.append(c)
        elif state == "double":
            if c == '"':
                state = "pre_value"
            elif c == "\\":
                state = "double_escape"
            else:
                value.append(c)
        elif state == "double_escape":
            state = "double"
            if c in '"\\`$':
                value.append(c)
            elif c != "\n":
                value.extend(["\\", c])
        elif state == "comment":
            if c == "\\":
                state = "comment_escape"
            elif c in NEWLINE:
                state = "pre_key"
        elif state == "comment_escape":
            # systemd since v254: a comment's trailing backslash does not carry the comment to the next line.
            state = "pre_key" if c in NEWLINE else "comment"
        if c == "\n":
            line += 1
    if state in ("value", "value_escape") and value_ws is not None:
        del value[value_ws:]
    if state in ("pre_value", "value", "value_escape", "single", "double", "double_escape"):
        push()
    return parsed


def config_path(environ: MutableMapping[str, str]) -> Path | None:
    """The file to read: TURNLOG_CONFIG when set (empty: none), else the default one if it exists."""
    if VARIABLE in environ:
        return Path(environ[VARIABLE]) if environ[VARIABLE].strip() else None
    return DEFAULT_PATH if DEFAULT_PATH.exists() else None


def read(path: Path) -> ParsedFile:
    try:
        return parse(path.read_bytes().decode("utf-8"))
    except FileNotFoundError:
        raise ConfigFileError(f"the configuration file {path} does not exist") from None
    except PermissionError:
        raise ConfigFileError(f"the configuration file {path} cannot be read by this user (uid {os.getuid()}): mode, owner or group") from None
    except IsADirectoryError:
        raise ConfigFileError(f"the configuration file {path} is a directory") from None
    except UnicodeDecodeError as error:
        raise ConfigFileError(f"the configuration file {path} is not UTF-8 text: {error}") from None
    except OSError as error:
        raise ConfigFileError(f"the configuration file {path} cannot be read: {error.strerror}") from None


# What the last load() read, for `turnlog check`.
loaded = LoadedConfig(path=None)


def load(environ: MutableMapping[str, str] | None = None) -> LoadedConfig:
    """Put the configuration file's settings into `environ` (os.environ) under those it already has."""
    global loaded
    environ = os.environ if environ is None else environ
    path = config_path(environ)
    if path is None:
        loaded = LoadedConfig(path=None)
        return loaded
    parsed = read(path)
    values = parsed.values()
    overridden = sorted(name for name in values if name in environ)
    for name, value in values.items():
        environ.setdefault(name, value)
    loaded = LoadedConfig(path=path, values=values, overridden=overridden, invalid=parsed.invalid)
    return loaded


def load_or_exit(environ: MutableMapping[str, str] | None = None) -> LoadedConfig:
    """load(), or the error on stderr and exit status 2."""
    import sys

    try:
        return load(environ)
    except ConfigFileError as error:
        print(f"turnlog: {error}", file=sys.stderr)
        raise SystemExit(2) from None
