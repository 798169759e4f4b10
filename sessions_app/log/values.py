"""What a stored JSON value may hold, the same on every database.

PostgreSQL's jsonb cannot store U+0000, and a lone surrogate ("\\ud800") is
not Unicode text (nothing can encode it to UTF-8 again), so both are refused
wherever they occur, keys included. Nesting is bounded so that no reader
recurses without limit, and a float must be finite (JSON has no NaN).
"""

import json
import math
import re
from dataclasses import dataclass

import orjson

# A request body (or a blob) may nest this many objects/arrays, counting the top-level one.
MAX_DEPTH = 64

# Python's JSON reader joins valid surrogate pairs, so any surrogate left in a str is lone.
_BAD_CHAR = re.compile("[\x00\ud800-\udfff]")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TOO_DEEP = "nests deeper than {} levels of objects and arrays"


@dataclass(frozen=True)
class Problem:
    """What is wrong (`kind`: "text", "depth" or "number") and where (`parts`: keys and indexes)."""

    kind: str
    parts: tuple
    text: str

    def describe(self, prefix: str = "") -> str:
        path = format_path(self.parts, prefix) or "the value"
        return f"{path if len(path) <= 160 else path[:157] + '...'}: {self.text}"


class UnacceptableValue(ValueError):
    """A value that no database here stores the same way; `problem` says what and where."""

    def __init__(self, problem: Problem, prefix: str = ""):
        super().__init__(problem.describe(prefix))
        self.problem = problem
        self.detail = problem.describe(prefix)


def format_path(parts: tuple, prefix: str = "") -> str:
    """`events[2].data.content[0].text`; keys that are not identifiers are quoted, escaped."""
    path = prefix
    for part in parts:
        if isinstance(part, int):
            path += f"[{part}]"
        elif _IDENTIFIER.fullmatch(part):
            path += f".{part}" if path else part
        else:
            path += f"[{json.dumps(part)}]"
    return path


def text_problem(text: str) -> str | None:
    """Why a string cannot be stored, or None."""
    found = _BAD_CHAR.search(text)
    if found is None:
        return None
    if found.group() == "\x00":
        return "contains U+0000 (NUL), which PostgreSQL cannot store"
    return f"contains a lone surrogate {json.dumps(found.group())[1:-1]}, which is not Unicode text"


_PLAIN = frozenset({int, bool, type(None)})


def _surely_storable(value: object, level: int, max_depth: int) -> bool:
    """A quick screen, level by level, with no paths: True when nothing can be wrong.

    Bodies of 8 MiB pass through here on every append, so the strings of a
    level are checked at once, and anything unusual is left to first_problem.
    """
    items, depth = [value], level
    while items:
        texts: list = []
        children: list = []
        for item in items:
            kind = type(item)
            if kind is str:
                texts.append(item)
            elif kind is dict:
                if depth > max_depth:
                    return False
                texts.extend(item)
                children.extend(item.values())
            elif kind is list:
                if depth > max_depth:
                    return False
                children.extend(item)
            elif kind is float:
                if not math.isfinite(item):
                    return False
            elif kind not in _PLAIN:
                return False  # a str/dict subclass, a tuple, a non-str key: look closely
        try:
            joined = "".join(texts)
        except TypeError:
            return False
        if "\x00" in joined or (not joined.isascii() and _BAD_CHAR.search(joined)):
            return False
        items, depth = children, depth + 1
    return True


def surely_storable(value: object, *, level: int = 1, max_depth: int = MAX_DEPTH) -> bool:
    """True when first_problem(value, level=level) is surely None (one quick pass over a whole batch)."""
    return _surely_storable(value, level, max_depth)


def first_problem(value: object, *, level: int = 1, max_depth: int = MAX_DEPTH) -> Problem | None:
    """The first unstorable thing in a decoded JSON value, depth first; `level` is the value's own.

    Iterative, so a value nested 100,000 levels deep is reported, not a RecursionError.
    """
    if _surely_storable(value, level, max_depth):
        return None
    pending = [(value, (), level)]
    while pending:
        item, parts, depth = pending.pop()
        if isinstance(item, str):
            if problem := text_problem(item):
                return Problem("text", parts, problem)
        elif isinstance(item, float):
            if not math.isfinite(item):
                return Problem("number", parts, f"{item} is not a JSON number")
        elif isinstance(item, dict | list | tuple):
            if depth > max_depth:
                return Problem("depth", parts, _TOO_DEEP.format(max_depth))
            children = item.items() if isinstance(item, dict) else enumerate(item)
            later = []
            for key, child in children:
                if isinstance(key, str) and (problem := text_problem(key)):
                    return Problem("text", (*parts, key), f"the key {problem}")
                later.append((child, (*parts, key), depth + 1))
            pending.extend(reversed(later))
    return None


def check(value: object, *, level: int = 1, prefix: str = "") -> None:
    """Raise UnacceptableValue for the first unstorable thing in `value`."""
    if (problem := first_problem(value, level=level)) is not None:
        raise UnacceptableValue(problem, prefix)


class InvalidJSON(ValueError):
    """Text that is not JSON as this project reads it; the message says what and where."""


class _NotANumber(ValueError):
    def __init__(self, token: str, why: str):
        super().__init__(why)
        self.token, self.why = token, why


def _refuse_constant(token: str) -> float:
    raise _NotANumber(token, f"{token} is not a JSON number")


def _finite_float(token: str) -> float:
    number = float(token)
    if math.isinf(number):
        raise _NotANumber(token, f"the number {token[:40]} is too large for a float")
    return number


_STRING = r'"(?:[^"\\]|\\.)*"'
_LONG_INTEGER = re.compile(_STRING + r"|(-?\d{4301,})")


def _position(text: str, index: int) -> str:
    line = text.count("\n", 0, index) + 1
    return f"line {line} column {index - text.rfind(chr(10), 0, index)}"


def _first_outside_strings(text: str, pattern: re.Pattern) -> int:
    """The index of the first match of `pattern`'s group 1 outside JSON strings, or 0."""
    for found in pattern.finditer(text):
        if found.group(1) is not None:
            return found.start(1)
    return 0


def loads(raw: bytes | str) -> object:
    """Read JSON strictly: UTF-8; no NaN, Infinity or float overflow; integers exact.

    Integers keep any size Python reads (up to 4,300 digits). Text nested too
    deep for the reader is reported as UnacceptableValue (kind "depth").
    Raises InvalidJSON saying what is wrong, with its line and column.
    """
    if isinstance(raw, bytes):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidJSON(f"the body is not UTF-8 text: {exc.reason} at byte {exc.start}") from None
    else:
        text = raw
    try:
        return json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
    except json.JSONDecodeError as exc:
        raise InvalidJSON(f"the body is not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except _NotANumber as exc:
        bounded = r"(?<![\w.+-])(" + re.escape(exc.token) + r")(?![\w.])"
        where = _first_outside_strings(text, re.compile(_STRING + "|" + bounded))
        raise InvalidJSON(f"the body is not JSON: {exc.why} at {_position(text, where)}") from None
    except RecursionError:
        raise UnacceptableValue(too_deep_at(text)) from None
    except ValueError:  # an integer past Python's limit of 4,300 digits
        where = _first_outside_strings(text, _LONG_INTEGER)
        raise InvalidJSON(f"the body holds an integer of more than 4,300 digits at {_position(text, where)}") from None


# Every byte but a digit becomes a space, a digit "0": a run of 19 digits then shows as
# _LONG_RUN. (bytes.translate and `in` cost well under a millisecond for a 270 KB body;
# a regular expression costs more than the parse itself.)
_DIGITS_ONLY = bytes(0x30 if 0x30 <= b <= 0x39 else 0x20 for b in range(256))
_LONG_RUN = b"0" * 19


def loads_fast(raw: bytes) -> object:
    """`loads`, faster: the same value, or the same error, for any input.

    orjson reads the body when it can read it exactly as `loads` does; any
    text it refuses is read again by `loads`, for that error's words and
    position (NaN, Infinity, 1e400, malformed or non-UTF-8 text, lone
    surrogates, nesting past orjson's limit). orjson turns integers outside
    64 bits into floats, so a body holding a run of 19 or more digits
    anywhere (even in a string) is left to `loads` too.
    """
    if _LONG_RUN not in raw.translate(_DIGITS_ONLY):
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass
    return loads(raw)


_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{},]')


def too_deep_at(text: str, max_depth: int = MAX_DEPTH) -> Problem:
    """Where JSON text first nests deeper than `max_depth`, read from the text alone.

    For text too deep for the JSON reader itself (it stops near 1,000 levels).
    """
    stack: list[list] = []  # per open container: [is_object, key or index, expecting a key]
    for token in _TOKEN.finditer(text):
        mark = token.group()
        if mark in ("[", "{"):
            if len(stack) + 1 > max_depth:
                return Problem("depth", tuple(entry[1] for entry in stack), _TOO_DEEP.format(max_depth))
            stack.append([mark == "{", None if mark == "{" else 0, mark == "{"])
        elif mark in ("]", "}"):
            if stack:
                stack.pop()
        elif mark == ",":
            if stack and stack[-1][0]:
                stack[-1][2] = True
            elif stack:
                stack[-1][1] += 1
        elif stack and stack[-1][0] and stack[-1][2]:  # an object's key
            try:
                key = json.loads(mark)
            except ValueError:
                key = mark[1:-1]
            stack[-1][1], stack[-1][2] = key, False
    return Problem("depth", (), _TOO_DEEP.format(max_depth))
