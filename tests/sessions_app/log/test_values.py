import json
import math

import pytest

from sessions_app.log.values import (
    MAX_DEPTH,
    InvalidJSON,
    UnacceptableValue,
    check,
    first_problem,
    format_path,
    loads,
    text_problem,
    too_deep_at,
)


def nested(levels: int) -> str:
    return "[" * levels + "]" * levels


@pytest.mark.parametrize("text", ["", "plain", "émoji 😀", loads('"a pair the reader joins: \\ud83d\\ude00"')])
def test_storable_text_has_no_problem(text):
    assert text_problem(text) is None


@pytest.mark.parametrize("text, words", [("\x00", "U+0000"), ("a\ud800", "\\ud800"), ("\udfff", "\\udfff")])
def test_nul_and_lone_surrogates_are_named(text, words):
    assert words in text_problem(text)


def test_the_path_names_keys_and_indexes_and_quotes_odd_keys():
    assert format_path(("events", 2, "data", "content", 0, "text")) == "events[2].data.content[0].text"
    assert format_path(("a b", 1), "body") == 'body["a b"][1]'


def test_first_problem_walks_keys_values_and_depth_without_recursion():
    assert first_problem({"a": [1, {"b": "x\x00"}]}).parts == ("a", 1, "b")
    assert first_problem({"k\ud800": 1}).text.startswith("the key contains a lone surrogate")
    assert first_problem([math.inf]).kind == "number"
    deep: list = []
    for _ in range(100_000):
        deep = [deep]
    problem = first_problem(deep)
    assert problem.kind == "depth" and len(problem.parts) == MAX_DEPTH
    assert first_problem(json.loads(nested(MAX_DEPTH))) is None


def test_check_raises_with_the_path_in_the_detail():
    with pytest.raises(UnacceptableValue, match=r"^metadata\.env: contains U\+0000"):
        check({"env": "\x00"}, prefix="metadata")


@pytest.mark.parametrize(
    "text, words",
    [
        ('{"a": NaN}', "NaN is not a JSON number at line 1 column 7"),
        ('[1,\n Infinity]', "Infinity is not a JSON number at line 2 column 2"),
        ('[-Infinity]', "-Infinity is not a JSON number at line 1 column 2"),
        ('["1e400", 1e400]', "1e400 is too large for a float at line 1 column 11"),
        ("[" + "9" * 4301 + "]", "more than 4,300 digits at line 1 column 2"),
        ('{"a": [1,', "Expecting value at line 1 column 10"),
        (b'"\xff"', "not UTF-8"),
        (b'"\xed\xa0\x80"', "not UTF-8"),
    ],
)
def test_loads_refuses_what_json_cannot_hold_saying_where(text, words):
    with pytest.raises(InvalidJSON) as refused:
        loads(text)
    assert words in str(refused.value)


def test_loads_keeps_integers_exact_and_floats_finite():
    assert loads('{"n": %d, "f": 1.5e300}' % (10**4299)) == {"n": 10**4299, "f": 1.5e300}


@pytest.mark.parametrize("levels", [1_000, 100_000])
def test_text_too_deep_for_the_reader_is_a_depth_problem_with_its_path(levels):
    text = '{"events": [{}, {"data": %s}]}' % nested(levels)
    with pytest.raises(UnacceptableValue) as refused:
        loads(text)
    assert refused.value.problem.parts[:4] == ("events", 1, "data", 0)
    assert len(refused.value.problem.parts) == MAX_DEPTH


def test_too_deep_at_skips_brackets_inside_strings_and_counts_keys():
    text = '{"a[": "]]", "b": [0, 1, %s]}' % nested(70)
    assert too_deep_at(text).parts[:4] == ("b", 2, 0, 0)
