"""sessions_app.lib.wording: figures in words, as the pages' filters and `manage.py sessions` print them."""

import pytest
from django.template import Context, Template

from sessions_app.lib import wording


@pytest.mark.parametrize(
    "value, words",
    [(None, ""), (0.85, "850 ms"), (12.44, "12.4 s"), (185, "3 min 5 s"), (7440, "2 h 4 min"), (334 * 86400 + 4 * 3600, "334 d 4 h")],
)
def test_seconds(value, words):
    assert wording.seconds(value) == words


@pytest.mark.parametrize("rate, words", [(None, "—"), (0.25, "25 %"), (0.125, "12.5 %"), (0.0001, "< 0.1 %"), (0, "0 %")])
def test_percent(rate, words):
    assert wording.percent(rate) == words


def test_duration_agent_label_and_strategy_counts():
    assert wording.duration(None) == "—" and wording.duration(3) == "3.0 s"
    assert wording.agent_label("") == "(no agent name)" and wording.agent_label("billing") == "billing"
    assert wording.strategy_counts([("restart_turn", 2), ("abandon", 1)]) == "restart_turn ×2, abandon ×1"
    assert wording.strategy_counts([]) == "—"


def test_seq_range_and_json_text():
    assert wording.seq_range(31, 31) == "seq 31" and wording.seq_range(31, 33) == "seqs 31–33"
    assert wording.seq_range(31, 33, dash="-") == "seqs 31-33"
    assert wording.json_text(None) == "" and wording.json_text("a") == "a"
    assert wording.json_text({"a": True, "é": None}) == '{"a": true, "é": null}'


def test_the_template_filters_are_these_functions():
    """The pages word a figure exactly as the commands do: the filters are the same functions."""
    rendered = Template(
        "{% load turnlog agents %}{{ s|seconds }}|{{ r|percent }}|{{ d|duration }}|{{ n|agent_label }}|{{ c|strategy_counts }}|{{ j|json_text }}"
    ).render(Context({"s": 185, "r": 0.125, "d": None, "n": "", "c": [("abandon", 1)], "j": {"a": 1}}))
    assert rendered == "3 min 5 s|12.5 %|—|(no agent name)|abandon ×1|{&quot;a&quot;: 1}"
