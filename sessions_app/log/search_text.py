"""Search text: what of an event or a note is searchable, the words of a query, and snippets.

Pure logic shared by the index (services/search.py), the queries
(sessions_app/selectors/search) and their tests. An event gives two texts: `words`,
its prose and code (message contents, reasoning, tool-call names and
arguments, tool results), indexed word by word; and `short`, the short
fields people search for pieces of (tool names, call ids, error codes,
paths), indexed by trigrams for substrings. Words are runs of letters,
numbers and marks, as SQLite's unicode61 tokenizer reads them, so that a
query's words are always single tokens there (never a phrase).
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from . import calls as log_calls
from . import events as log_events

QUERY_MAX = 200  # characters of a query
SHORT_FIELD_MAX = 512  # a short field longer than this is not a piece anyone types
# Of an event's words, the first 100,000 characters are indexed: PostgreSQL refuses a tsvector past 1 MB,
# and 100,000 characters of UTF-8 (4 bytes at most) with 4 bytes per distinct word stay below it.
WORDS_MAX = 100_000
LEXEME_MAX = 255  # characters; a longer "word" is no word anyone types (PostgreSQL refuses lexemes past 2 KB)
SUBSTRING_MIN = 3  # trigrams: a shorter piece matches nothing
SNIPPET_WIDTH = 160
# A path: a run holding a slash, without the spaces, quotes and brackets JSON and prose put around one.
_PATH = re.compile(r"[^\s\"'()\[\]{}<>,;]*/[^\s\"'()\[\]{}<>,;]*")


@dataclass(frozen=True, slots=True)
class Searchable:
    words: str
    short: str

    def __bool__(self) -> bool:
        return bool(self.words or self.short)

    @property
    def text(self) -> str:
        """What a snippet is cut from: the words, then the short fields not already among them."""
        extra = [field for field in self.short.split("\n") if field and field not in self.words]
        return "\n".join([self.words, *extra]) if extra else self.words


def event_searchable(type: str, data: Mapping) -> Searchable:  # noqa: A002
    """The searchable texts of one event's data (empty for bookkeeping but tool_call)."""
    if type not in _TEXT_TYPES:
        return NOTHING
    words: list[str] = []
    short: list[str] = []
    if type in log_events.SURFACE_TYPES:
        words.extend(_strings(data.get("content")))
        if type == "assistant_message":
            words.extend(_strings(data.get("reasoning_content")))
            for call in log_events.tool_calls_of(data):
                _add_call(call, words, short)
        if type == "tool_result":
            _add_short(short, log_events.call_id(data))
            metadata = data.get("metadata")
            if isinstance(metadata, Mapping):
                for key in ("error", "error_code", "code"):
                    if isinstance(metadata.get(key), str):
                        _add_short(short, metadata[key])
    elif type == "tool_call":
        _add_call(data, words, short)
    for text in words:
        if "/" in text:
            for piece in _PATH.findall(text):
                _add_short(short, piece.strip("."))
    return Searchable(words="\n".join(w for w in words if w)[:WORDS_MAX], short="\n".join(dict.fromkeys(short)))


NOTHING = Searchable(words="", short="")
SEARCHABLE_TYPES = _TEXT_TYPES = log_events.SURFACE_TYPES | {"tool_call"}  # the types whose events may hold searchable text


def note_searchable(text: str, tags: list) -> Searchable:
    return Searchable(words="\n".join([text, *(t for t in tags if isinstance(t, str))])[:WORDS_MAX], short="")


def _add_call(call: Mapping, words: list[str], short: list[str]) -> None:
    name = log_calls.name_text(log_calls.call_name(call))
    words.append(name)
    _add_short(short, name)
    _add_short(short, log_events.call_id(call))
    arguments = log_calls.raw_arguments(call)
    if isinstance(arguments, str):
        words.append(arguments)
    elif arguments is not None:
        words.append(json.dumps(arguments, ensure_ascii=False))


def _add_short(short: list[str], value: str | None) -> None:
    if value and len(value) <= SHORT_FIELD_MAX:
        short.append(value.replace("\n", " "))


def _strings(value: object) -> Iterator[str]:
    """Every string in a content value (a text, or blocks of them), depth first; a block's `type` is no text."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            if key != "type":
                yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


# Queries ---------------------------------------------------------------------


_WORD = re.compile(r"[^\W_]+")  # runs of letters and numbers (str.isalnum)


def words_of(text: str) -> list[str]:
    """A query's words: runs of letters and numbers known since Unicode 3.2.

    Each is then one token for SQLite's unicode61 (whose tables are older than
    Python's), so a quoted word is never read as a phrase, which an index
    without positions refuses. A newer letter separates words instead.
    """
    found: list[str] = []
    for run in _WORD.findall(text):
        current: list[str] = []
        for ch in run:
            if unicodedata.ucd_3_2_0.category(ch)[0] in "LN":
                current.append(ch)
            elif current:
                found.append("".join(current))
                current = []
        if current:
            found.append("".join(current))
    return found


def fold(text: str) -> str:
    """Case and diacritics folded, as both indexes compare (unicode61 remove_diacritics)."""
    decomposed = unicodedata.normalize("NFKD", text.lower())
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch))


def lexemes(text: str) -> str:
    """The distinct words of a text as PostgreSQL's index holds them, space-separated: lowered, accents removed.

    PostgreSQL gets the words cut here rather than from its own parser (`to_tsvector('simple', ...)`
    cost 80 microseconds per event, most of an append's index cost): the same words, cut as SQLite's
    unicode61 cuts them, and the `simple` configuration's lowering, with unicode61's accent removal.
    """
    found = set(_WORD.findall(text.lower()))
    if not text.isascii():
        found = {part for word in found for part in ((word,) if word.isascii() else fold(word).split())}
    return " ".join(word for word in found if len(word) <= LEXEME_MAX)


@dataclass(frozen=True)
class Query:
    terms: tuple[str, ...]  # distinct words, each matched as a whole word (all of them), safe as FTS5 strings
    substring: str | None  # the whole query as a piece of a short field (3 characters or more)
    lexemes: str = ""  # the words as `lexemes` gives them, for PostgreSQL

    @property
    def tsquery(self) -> str:
        """A tsquery of every lexeme (quoted: nothing in it is syntax)."""
        return " & ".join("'" + word.replace("\\", "\\\\").replace("'", "''") + "'" for word in self.lexemes.split())

    @property
    def empty(self) -> bool:
        return not self.terms and not self.lexemes and self.substring is None


def parse_query(q: str) -> Query:
    """The words and the piece a query searches for. `q` is trusted to be 1..QUERY_MAX characters.

    A NUL (which no stored text holds, and which ends an FTS5 string) separates like a space.
    """
    stripped = q.replace("\x00", " ").strip()
    terms = tuple(dict.fromkeys(w.lower() for w in words_of(stripped)))  # FTS folds case itself; casefold would change letters
    substring = stripped if len(stripped) >= SUBSTRING_MIN and len(stripped) <= SHORT_FIELD_MAX else None
    return Query(terms=terms, substring=substring, lexemes=lexemes(stripped))


def fts5_match(terms: tuple[str, ...]) -> str:
    """An FTS5 query for all the terms: each quoted, so no term is read as syntax."""
    return " AND ".join('"' + term.replace('"', '""') + '"' for term in terms)


def fts5_substring(piece: str) -> str:
    return '"' + piece.replace('"', '""') + '"'


# Snippets --------------------------------------------------------------------


def _fold_word(word: str) -> str:
    return word.lower() if word.isascii() else fold(word)


def highlights_in(text: str, query: Query, start: int = 0, end: int | None = None) -> list[tuple[int, int]]:
    """Where the query matches in text[start:end]: its words as whole words, its piece anywhere; sorted, merged."""
    end = len(text) if end is None else end
    wanted = {fold(t) for t in query.terms}
    ranges = [m.span() for m in _WORD.finditer(text, start, end) if _fold_word(m.group()) in wanted]
    if query.substring:
        lowered, piece = text.casefold(), query.substring.casefold()
        if len(lowered) == len(text):  # casefold kept offsets (no ß -> ss)
            at = lowered.find(piece, start, end)
            while at >= 0:
                ranges.append((at, at + len(piece)))
                at = lowered.find(piece, at + len(piece), end)
    merged: list[tuple[int, int]] = []
    for s, e in sorted(ranges):
        if merged and s <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(e, merged[-1][1]))
        else:
            merged.append((s, e))
    return merged


def _first_match(text: str, query: Query) -> int:
    wanted = {fold(t) for t in query.terms}
    first = next((m.start() for m in _WORD.finditer(text) if _fold_word(m.group()) in wanted), len(text))
    if query.substring:
        at = text.casefold().find(query.substring.casefold())
        if 0 <= at < first and len(text.casefold()) == len(text):
            first = at
    return 0 if first == len(text) else first


def snippet(text: str, query: Query, width: int = SNIPPET_WIDTH) -> tuple[str, list[tuple[int, int]]]:
    """A window of about `width` characters around the first match, and the matches in it.

    Offsets count characters of the returned snippet, [start, end); a match cut by the window's edge is cut too.
    """
    first = _first_match(text, query)
    start = max(0, min(first - width // 4, len(text) - width))
    end = min(len(text), start + width)
    ranges = highlights_in(text, query, start, end)
    return text[start:end], [(s - start, e - start) for s, e in ranges]
