"""search_text.py: which text of an event is searchable, a query's words and piece, and snippets; with hypothesis
against a real FTS5 index (the tokenizers of migration 0012_search), so no query is ever read as syntax."""

import sqlite3

from hypothesis import given, settings
from hypothesis import strategies as st

from sessions_app.log import search_text as s

FTS5 = sqlite3.connect(":memory:")
FTS5.execute("CREATE VIRTUAL TABLE word_index USING fts5(words, tokenize='unicode61 remove_diacritics 2', content='', detail='none', columnsize=0)")
FTS5.execute("CREATE VIRTUAL TABLE short_index USING fts5(short, tokenize='trigram', content='', detail='full', columnsize=0)")


def test_an_assistant_message_gives_its_content_reasoning_and_calls():
    data = {
        "content": [{"type": "text", "text": "Let me check"}],
        "reasoning_content": "the user wants a refund",
        "tool_calls": [
            {"id": "call_1", "name": "read_file", "arguments": {"path": "/srv/app/main.py"}},
            {"id": "call_2", "type": "function", "function": {"name": "charge_card", "arguments": '{"amount": 5}'}},
        ],
    }
    found = s.event_searchable("assistant_message", data)
    assert found.words.split("\n") == ["Let me check", "the user wants a refund", "read_file", '{"path": "/srv/app/main.py"}', "charge_card", '{"amount": 5}']
    assert found.short.split("\n") == ["read_file", "call_1", "charge_card", "call_2", "/srv/app/main.py"]


def test_a_tool_result_gives_its_content_call_id_and_error_code():
    found = s.event_searchable("tool_result", {"tool_call_id": "call_7", "content": "denied", "metadata": {"error": "E_CARD_DECLINED"}})
    assert (found.words, found.short) == ("denied", "call_7\nE_CARD_DECLINED")
    assert "E_CARD_DECLINED" in found.text and "call_7" in found.text


def test_bookkeeping_gives_nothing_but_a_tool_call_its_name_and_id():
    assert not s.event_searchable("turn_start", {"turn": 1})
    found = s.event_searchable("tool_call", {"id": "c1", "name": "echo"})
    assert ("echo" in found.words, found.short) == (True, "echo\nc1")


def test_a_long_short_field_is_left_to_the_words():
    long_name = "x" * (s.SHORT_FIELD_MAX + 1)
    found = s.event_searchable("tool_call", {"id": "c1", "name": long_name})
    assert found.short == "c1" and long_name in found.words


def test_a_query_is_words_and_a_piece():
    query = s.parse_query("  Charge_Card  call ")
    assert (query.terms, query.substring) == (("charge", "card", "call"), "Charge_Card  call")
    assert sorted(query.lexemes.split()) == ["call", "card", "charge"]
    assert (s.parse_query("ab").terms, s.parse_query("ab").substring) == (("ab",), None)
    assert s.parse_query("!!").empty
    assert s.fts5_match(("a", 'b"c')) == '"a" AND "b""c"'


def test_lexemes_are_distinct_lowered_words_without_accents_and_the_tsquery_quotes_them():
    assert sorted(s.lexemes("Café CAFE o'k " + "x" * 300).split()) == ["cafe", "k", "o"]
    assert s.Query(terms=(), substring=None, lexemes="it's a\\b").tsquery == "'it''s' & 'a\\\\b'"


def test_a_snippet_is_cut_around_the_first_match_with_its_highlights():
    text = "x " * 200 + "the Refund went through, refund confirmed"
    snippet, highlights = s.snippet(text, s.parse_query("refund"))
    assert len(snippet) == s.SNIPPET_WIDTH and snippet.endswith("refund confirmed")
    assert [snippet[a:b] for a, b in highlights] == ["Refund", "refund"]


def test_highlights_fold_case_and_accents_and_merge_overlaps():
    query = s.parse_query("cafe")
    assert s.highlights_in("Café au lait", query) == [(0, 4)]
    assert s.highlights_in("call_8F3a8f3", s.parse_query("8f3")) == [(5, 8), (9, 12)]


@settings(max_examples=300, deadline=None)
@given(st.text(min_size=1, max_size=s.QUERY_MAX))
def test_no_query_is_an_fts5_syntax_error(q):
    query = s.parse_query(q)
    if query.terms:
        FTS5.execute("SELECT rowid FROM word_index WHERE word_index MATCH ?", (s.fts5_match(query.terms),)).fetchall()
    if query.substring:
        FTS5.execute("SELECT rowid FROM short_index WHERE short_index MATCH ?", (s.fts5_substring(query.substring),)).fetchall()


WORD = st.text(st.characters(categories=["Ll", "Lu", "Nd"], max_codepoint=0x17F), min_size=1, max_size=12)  # letters older than Unicode 3.2


@settings(max_examples=200, deadline=None)
@given(st.lists(WORD, min_size=1, max_size=20), st.data())
def test_fts5_finds_a_word_of_the_text_and_the_snippet_highlights_it(words, data):
    text = " ".join(words)
    term = data.draw(st.sampled_from(words))
    rowid = abs(hash(text)) % 2**62
    FTS5.execute("INSERT INTO word_index (rowid, words) VALUES (?, ?)", (rowid, text))
    query = s.parse_query(term)
    found = FTS5.execute("SELECT rowid FROM word_index WHERE word_index MATCH ? AND rowid = ?", (s.fts5_match(query.terms), rowid)).fetchall()
    assert found == [(rowid,)]
    snippet, highlights = s.snippet(text, query)
    assert snippet in text and highlights
    assert all(0 <= a < b <= len(snippet) for a, b in highlights)
    assert all(b1 < a2 for (_, b1), (a2, _) in zip(highlights, highlights[1:], strict=False))
    assert any(s.fold(snippet[a:b]) in {s.fold(t) for t in query.terms} for a, b in highlights)
