"""`manage.py sessions agents`: the Agents page's table as text, against a world of known counts (tests/agents_world.py)."""

import io
import re

import pytest
from django.core.management import CommandError, call_command

from tests import agents_world
from tests.agents_world import HTML_NAME

pytestmark = pytest.mark.django_db


@pytest.fixture
def world(django_user_model):
    return agents_world.build(django_user_model.objects.create_user("reader"))


def table(*args) -> list[list[str]]:
    out = io.StringIO()
    call_command("sessions", "agents", *args, stdout=out)
    return [re.split(r"\s{2,}", line.strip()) for line in out.getvalue().splitlines()]


def test_the_table_of_one_project_has_the_pages_columns_and_counts(world):
    header, nameless, html, bot = table("--project", "alpha")
    assert header == [
        "AGENT", "SESS 24H", "SESS 7D", "TURNS 24H", "TURNS 7D", "CRASHED 24H", "CRASHED 7D", "RATE 24H", "RATE 7D",
        "STALLED MEDIAN", "STALLED MAX", "AUTO", "MANUAL", "STALLED NOW", "LAST FAILURE", "STRATEGIES",
    ]  # fmt: skip
    assert bot == [
        "billing-bot", "4", "7", "6", "20", "3", "8", "50 %", "40 %", "6 min 40 s", "10 min 0 s", "1", "2", "1", "stalled b4",
        "restart_turn ×3, abandon ×1",
    ]  # fmt: skip
    assert nameless[:14] == ["(no agent name)", "1", "1", "1", "1", "1", "1", "100 %", "100 %", "3 min 20 s", "3 min 20 s", "0", "1", "0"]
    assert nameless[14].endswith(" nameless") and nameless[15] == "restart_turn ×1"
    assert html == [HTML_NAME, "1", "1", "1", "1", "0", "0", "0 %", "0 %", "—", "—", "0", "0", "0", "-", "—"]


def test_without_a_project_every_project_counts(world):
    rows = {row[0]: row for row in table()[1:]}
    assert list(rows) == ["(no agent name)", HTML_NAME, "beta-only", "billing-bot"]
    assert rows["billing-bot"][1:6] == ["5", "8", "11", "25", "4"] and rows["billing-bot"][13] == "2"


def test_no_agent_and_an_unknown_project(world, db):
    from sessions_app.models import Project

    Project.objects.create(slug="empty")
    assert table("--project", "empty") == [["No agent active in the last 7 days in project 'empty', and none stalled."]]
    with pytest.raises(CommandError, match="no such project"):
        table("--project", "nowhere")


def test_control_characters_in_a_name_stay_on_one_line(world):
    agents_world.session("odd", world.alpha, "two\nlines", agents_world.turns(1))
    names = [row[0] for row in table("--project", "alpha")[1:]]
    assert "two\\nlines" in names
