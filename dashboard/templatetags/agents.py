"""Formatting of the Agents pages' figures, shared with `manage.py sessions agents`."""

from django import template

from dashboard.templatetags.turnlog import seconds
from sessions_app.log import strategy as log_strategy

register = template.Library()


@register.filter
def percent(rate: float | None) -> str:
    """A crash rate in words: "25 %", "12.5 %", "< 0.1 %"; "—" without turns to divide by."""
    if rate is None:
        return "—"
    value = rate * 100
    if 0 < value < 0.05:
        return "< 0.1 %"
    return f"{value:.1f}".removesuffix(".0") + " %"


@register.filter
def duration(value: float | None) -> str:
    """A time spent stalled: as the `seconds` filter words it, "—" when none was recorded."""
    return "—" if value is None else seconds(value)


@register.filter
def agent_label(name: str) -> str:
    """How an agent name reads: the empty name (sessions created without one) is "(no agent name)"."""
    return name if name else "(no agent name)"


@register.filter
def strategy_counts(strategies) -> str:
    """(name, count) pairs as "restart_turn ×2, abandon ×1"; "—" when none."""
    return ", ".join(f"{name} ×{count}" for name, count in strategies) or "—"


@register.filter
def deciding_calls(recorded_strategy) -> list[dict]:
    """The calls that decided a recorded strategy (its `calls` in api.md's wire form), for naming them."""
    return log_strategy.deciding_in_wire(recorded_strategy)
