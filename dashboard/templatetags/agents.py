"""Formatting of the Agents pages' figures (sessions_app.lib.wording, which `manage.py sessions agents` prints with)."""

from django import template

from sessions_app.lib import wording
from sessions_app.log import strategy as log_strategy

register = template.Library()
register.filter("percent", wording.percent)
register.filter("duration", wording.duration)
register.filter("agent_label", wording.agent_label)
register.filter("strategy_counts", wording.strategy_counts)


@register.filter
def deciding_calls(recorded_strategy) -> list[dict]:
    """The calls that decided a recorded strategy (its `calls` in api.md's wire form), for naming them."""
    return log_strategy.deciding_in_wire(recorded_strategy)
