"""Tokens and cost per agent and day on the Agents pages, from the hourly sums (AgentModelHour), priced at each hour."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from sessions_app import selectors, services
from sessions_app.models import AgentModelHour, ModelPrice, Project

pytestmark = pytest.mark.django_db


def spent(agent: str, hours_ago: int, input_tokens: int, output_tokens: int, model: str = "house-model-9") -> None:
    hour = (timezone.now() - timedelta(hours=hours_ago)).replace(minute=0, second=0, microsecond=0)
    AgentModelHour.objects.create(
        project=Project.default(), agent_name=agent, model=model, hour=hour, calls=1, input_tokens=input_tokens, output_tokens=output_tokens
    )


def test_each_agent_s_week_and_days_are_summed_and_priced_at_each_hour():
    now = timezone.now()
    ModelPrice.objects.create(project=Project.default(), model="house-model-9", valid_from=now - timedelta(days=30), input=Decimal(1), output=Decimal(2))
    spent("billing", 0, 1_000_000, 0)
    spent("billing", 49, 0, 1_000_000)
    spent("billing", 24 * 9, 5_000_000, 0)  # older than the week: not counted
    spent("support", 0, 10, 10, model="mystery")
    billing, support = selectors.agent_usage([Project.default().pk], now)
    assert billing.agent_name == "billing" and billing.week.cost == Decimal(3) and billing.week.tokens == 2_000_000
    assert [day for day, _ in billing.days][-1] == now.date() and len(billing.days) == 7
    by_day = {day: bill for day, bill in billing.days}
    assert by_day[now.date()].cost + by_day[(now - timedelta(hours=49)).date()].cost == Decimal(3)
    assert not support.week.priced and support.week.unpriced == ("mystery",)


def test_the_agents_pages_show_tokens_and_cost_per_day(viewer):
    services.create_session(session_id="s", agent_name="billing")
    spent("billing", 0, 1200, 300, model="mystery")
    page = viewer.get("/agents/").content.decode()
    section = page[page.index('<section class="agent-usage"') :]
    assert "Tokens and cost" in section and ">1,500</span>" in section and "partly priced" in section
    detail = viewer.get("/agents/agent", {"name": "billing"}).content.decode()
    assert '<section class="agent-usage"' in detail and ">1,500</span>" in detail


def test_without_usage_the_section_says_so(viewer):
    assert "No model usage in the last 7 days." in viewer.get("/agents/").content.decode()
