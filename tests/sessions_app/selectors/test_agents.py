"""selectors.agent_summaries / agent_crashes against a world of known counts (tests/agents_world.py)."""

from datetime import timedelta

import pytest

from sessions_app import selectors
from sessions_app.selectors import AgentWindow
from tests import agents_world
from tests.agents_world import HTML_NAME

pytestmark = pytest.mark.django_db


@pytest.fixture
def world(django_user_model):
    return agents_world.build(django_user_model.objects.create_user("reader"))


def by_name(summaries):
    return {s.agent_name: s for s in summaries}


def test_an_agents_counts_over_24_hours_and_7_days(world):
    bot = by_name(selectors.agent_summaries([world.alpha.pk]))["billing-bot"]
    assert bot.day == AgentWindow(sessions=4, turns=6, crashed_turns=3)  # b2, b3 recovered; b4 stalled now
    assert bot.week == AgentWindow(sessions=7, turns=20, crashed_turns=8)
    assert bot.day.crash_rate == pytest.approx(0.5) and bot.week.crash_rate == pytest.approx(0.4)
    assert (bot.automatic, bot.manual) == (1, 2)
    assert (bot.stalled_median, bot.stalled_max) == (400, 600)
    assert bot.strategies == (("restart_turn", 3), ("abandon", 1))
    assert bot.stalled_now == 1
    assert bot.last_failure.stalled and bot.last_failure.session_id == "b4"
    assert bot.last_failure.quiet_seconds >= 1000


def test_the_other_agents_and_the_empty_name(world):
    agents = by_name(selectors.agent_summaries([world.alpha.pk]))
    assert list(agents) == ["", HTML_NAME, "billing-bot"]  # by name; another project's agents are absent
    nameless, html = agents[""], agents[HTML_NAME]
    assert nameless.week == AgentWindow(1, 1, 1) and nameless.day.crash_rate == 1
    assert nameless.last_failure.session_id == "nameless" and not nameless.last_failure.stalled
    assert nameless.last_failure.quiet_seconds == 200
    assert html.week == AgentWindow(1, 1, 0) and html.week.crash_rate == 0
    assert html.last_failure is None and html.strategies == () and html.stalled_median is None


def test_a_project_the_reader_cannot_see_never_contributes_but_both_add_up(world):
    both = by_name(selectors.agent_summaries([world.alpha.pk, world.beta.pk]))
    assert both["billing-bot"].day == AgentWindow(sessions=5, turns=11, crashed_turns=4)  # with both stalls
    assert both["billing-bot"].stalled_now == 2
    assert both["beta-only"].week == AgentWindow(1, 2, 1)
    assert selectors.agent_summaries([]) == []


def test_the_windows_follow_now(world):
    later = world.t0 + timedelta(days=5)  # the hour 3 days ago has left the week, b6's two days ago has not
    bot = by_name(selectors.agent_summaries([world.alpha.pk], later))["billing-bot"]
    assert bot.day == AgentWindow(0, 0, 0)
    assert bot.week == AgentWindow(sessions=5, turns=10, crashed_turns=5)  # b4, stalled since t0, still in the week
    assert (bot.automatic, bot.manual, bot.stalled_now) == (1, 2, 1)
    much_later = world.t0 + timedelta(days=30)
    assert [s.agent_name for s in selectors.agent_summaries([world.alpha.pk], much_later)] == ["billing-bot"]  # only b4, stalled


def test_one_agent(world):
    (bot,) = selectors.agent_summaries([world.alpha.pk], agent_name="billing-bot")
    assert bot.week.turns == 20
    assert selectors.agent_summaries([world.alpha.pk], agent_name="beta-only") == []
    assert selectors.agent_exists([world.alpha.pk], "") and not selectors.agent_exists([world.alpha.pk], "beta-only")


def test_an_agents_crashes_newest_first_in_pages(world):
    crashes = selectors.agent_crashes([world.alpha.pk], "billing-bot")
    assert [r.session_id for r in crashes.items] == ["b3", "b2", "b6", "b5"] and crashes.next_cursor is None
    first = selectors.agent_crashes([world.alpha.pk], "billing-bot", limit=3)
    rest = selectors.agent_crashes([world.alpha.pk], "billing-bot", before=first.next_cursor, limit=3)
    assert [r.session_id for r in first.items + rest.items] == ["b3", "b2", "b6", "b5"] and rest.next_cursor is None
    assert [r.session_id for r in selectors.agent_crashes([world.beta.pk], "billing-bot").items] == []
    with pytest.raises(selectors.InvalidCursor):
        selectors.agent_crashes([world.alpha.pk], "billing-bot", before="nonsense")
    assert [s.id for s in selectors.agent_stalled_sessions([world.alpha.pk], "billing-bot")] == ["b4"]
