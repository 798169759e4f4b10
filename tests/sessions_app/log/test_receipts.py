"""A call's idempotency key (spec section 1) and receipt (a policy's RFC 6901 pointer into its first real result)."""

import json

from hypothesis import given
from hypothesis import strategies as st

from sessions_app.log import receipts
from sessions_app.log.receipts import TOOL_CALL, TOOL_CALLS_ENTRY, TOOL_RESULT, idempotency_key


def key_of(*places):
    found = idempotency_key(places)
    return None if found is None else found[1]


def test_the_tool_call_events_metadata_wins_over_every_other_place():
    places = [
        (TOOL_CALLS_ENTRY, {"id": "c1", "metadata": {"idempotency_key": "entry"}, "arguments": {"idempotency_key": "args"}}),
        (TOOL_RESULT, {"tool_call_id": "c1", "metadata": {"idempotency_key": "result"}}),
        (TOOL_CALL, {"id": "c1", "metadata": {"idempotency_key": "dispatch"}}),
    ]
    assert key_of(*places) == "dispatch"
    assert key_of(*places[:2]) == "entry"
    assert key_of(places[1], (TOOL_CALLS_ENTRY, {"id": "c1", "arguments": {"idempotency_key": "args"}})) == "args"
    assert key_of(places[1]) == "result"


def test_arguments_sent_as_json_text_are_read_as_call_arguments_reads_them():
    openai_shape = {"id": "c1", "type": "function", "function": {"name": "charge", "arguments": '{"idempotency_key": "order-42"}'}}
    assert key_of((TOOL_CALLS_ENTRY, openai_shape)) == "order-42"
    assert key_of((TOOL_CALLS_ENTRY, {"id": "c1", "arguments": "not json"})) is None
    assert key_of((TOOL_CALLS_ENTRY, {"id": "c1", "arguments": {"nested": {"idempotency_key": "deep"}}})) is None


def test_an_integer_becomes_its_decimal_string_and_other_values_are_unusable():
    assert key_of((TOOL_CALL, {"metadata": {"idempotency_key": 42}})) == "42"
    for unusable in (True, False, None, 1.5, [], {}, ""):
        assert key_of((TOOL_CALL, {"metadata": {"idempotency_key": unusable}})) is None
    # An unusable value lets the next place answer.
    assert key_of((TOOL_CALL, {"metadata": {"idempotency_key": True}}), (TOOL_RESULT, {"metadata": {"idempotency_key": "r"}})) == "r"


def test_metadata_that_is_not_an_object_holds_no_key():
    assert key_of((TOOL_CALL, {"metadata": "idempotency_key"}), (TOOL_CALLS_ENTRY, {"metadata": ["x"]})) is None


def test_within_one_place_the_first_event_wins():
    assert key_of((TOOL_CALL, {"metadata": {"idempotency_key": "first"}}), (TOOL_CALL, {"metadata": {"idempotency_key": "second"}})) == "first"


_key = st.one_of(st.text(min_size=1, max_size=20), st.integers())
_place = st.sampled_from([TOOL_CALL, TOOL_CALLS_ENTRY, TOOL_RESULT])


@given(st.lists(st.tuples(_place, st.one_of(st.none(), _key), st.booleans()), max_size=6), st.randoms())
def test_the_key_depends_on_where_it_was_read_not_on_the_order_events_came_in(specs, random):
    """Placing the same keys in any order changes only which key wins among one place's."""
    places = []
    for kind, value, in_arguments in specs:
        if in_arguments and kind != TOOL_RESULT:
            places.append((kind, {"arguments": {"idempotency_key": value}}))
        else:
            places.append((kind, {"metadata": {"idempotency_key": value}}))
    found = idempotency_key(places)
    shuffled = list(places)
    random.shuffle(shuffled)
    again = idempotency_key(shuffled)
    assert (found is None) == (again is None)
    if found is not None:
        assert found[0] == again[0]
        assert found[0] == min(rank for kind, data in places for rank, _ in receipts.key_sources(kind, data))


# Receipts ---------------------------------------------------------------------


def test_a_pointer_finds_the_receipt_in_a_json_text_content():
    result = {"tool_call_id": "c1", "content": json.dumps({"charge": {"id": "ch_3Px", "amount": 1200}})}
    assert receipts.receipt(result, "/charge/id") == "ch_3Px"
    assert receipts.receipt(result, "/charge/amount") == "1200"
    assert receipts.receipt(result, "/charge") == '{"id":"ch_3Px","amount":1200}'
    assert receipts.receipt(result, "/charge/missing") is None


def test_a_pointer_reads_content_that_is_an_object_or_a_list():
    assert receipts.receipt({"content": {"id": "x"}}, "/id") == "x"
    assert receipts.receipt({"content": [{"id": "a"}, {"id": "b"}]}, "/1/id") == "b"
    assert receipts.receipt({"content": [{"id": "a"}]}, "/01/id") is None  # no leading zeros
    assert receipts.receipt({"content": [{"id": "a"}]}, "/-") is None
    assert receipts.receipt({"content": {"id": None}}, "/id") is None
    assert receipts.receipt({"content": {"ok": True}}, "/ok") == "true"


def test_escapes_read_slash_and_tilde_in_member_names():
    content = {"a/b": {"m~n": "found"}}
    assert receipts.receipt({"content": content}, "/a~1b/m~0n") == "found"


def test_no_pointer_an_invalid_one_or_plain_text_content_gives_no_receipt():
    assert receipts.receipt({"content": '{"id": "x"}'}, "") is None
    assert receipts.receipt({"content": '{"id": "x"}'}, None) is None
    assert receipts.receipt({"content": '{"id": "x"}'}, "id") is None
    assert receipts.receipt({"content": "charged ch_1"}, "/id") is None
    assert receipts.receipt("not a result", "/id") is None


def test_pointer_problem_accepts_rfc_6901_pointers_only():
    for good in ("", "/", "/a", "/a~0b", "/a~1b", "/0", "/a/01"):
        assert receipts.pointer_problem(good) is None, good
    for bad in ("a", "/a~", "/a~2", "~1", 5):
        assert receipts.pointer_problem(bad) is not None, bad


def test_a_value_too_long_to_be_looked_up_is_no_receipt():
    assert receipts.receipt({"content": {"id": "x" * 501}}, "/id") is None
    assert receipts.receipt({"content": {"id": "x" * 500}}, "/id") == "x" * 500


# Text the log can store (no NUL, no lone surrogate): a JSON text holding either is not parsed (log.calls).
_text = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=10)
_json = st.recursive(
    st.none() | st.booleans() | st.integers() | _text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_text, inner, max_size=4),
    max_leaves=12,
)


def _pointer(parts):
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


@given(_json, st.data())
def test_a_pointer_built_from_a_path_into_the_content_finds_that_value(document, data):
    path, node = [], document
    while isinstance(node, (dict, list)) and node and data.draw(st.booleans()):
        if isinstance(node, dict):
            step = data.draw(st.sampled_from(sorted(node)))
        else:
            step = data.draw(st.integers(0, len(node) - 1))
        path.append(step)
        node = node[step]
    pointer = _pointer(path)
    expected = receipts.reference_text(node)
    if pointer:
        assert receipts.receipt({"content": json.dumps(document)}, pointer) == expected
        assert receipts.receipt({"content": document}, pointer) == expected
    if isinstance(node, str) and node:
        assert expected == node
    elif node is not None and expected is not None:
        assert json.loads(expected) == node
