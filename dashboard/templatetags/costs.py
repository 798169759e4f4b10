"""How usage reads on pages: token counts, costs (pricing.Bill) and durations, the same in page loads and live frames."""

from __future__ import annotations

from decimal import Decimal

from django import template
from django.utils.html import format_html

from sessions_app.log import pricing

register = template.Library()


@register.filter
def token_count(value: int | None) -> str:
    """12, 4,310, 12.3k, 4.1M: short enough for a table column (the exact count goes in a title)."""
    value = value or 0
    if value < 10_000:
        return f"{value:,}"
    if value < 1_000_000:
        return f"{value / 1000:.1f}k"
    return f"{value / 1_000_000:.1f}M"


@register.filter
def dollars(cost: Decimal | None) -> str:
    """A cost in USD as api.md writes it (at most 6 places), with a dollar sign."""
    return f"${pricing.text(Decimal(cost or 0))}"


@register.filter
def duration_ms(value: int | None) -> str:
    """850 ms, 4.2 s, 3 min 20 s, 2 h 5 min, 3 d 4 h."""
    ms = value or 0
    if ms < 1000:
        return f"{ms} ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f} s"
    minutes, second = divmod(ms // 1000, 60)
    if minutes < 60:
        return f"{minutes} min {second} s"
    hours, minute = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minute} min"
    days, hour = divmod(hours, 24)
    return f"{days} d {hour} h"


@register.simple_tag
def cost_of(bill: pricing.Bill | None):
    """A bill's cost; "partly priced" marked beside it when some model had no price, which ones in its title."""
    if bill is None:
        return ""
    cost = format_html('<span class="cost">{}</span>', dollars(bill.cost))
    if bill.priced:
        return cost
    missing = ", ".join(bill.unpriced)
    return format_html(
        '{} <span class="badge warn partly-priced" tabindex="0" title="No price for {}: the cost counts only the other models">partly priced</span>',
        cost, missing,
    )  # fmt: skip


@register.simple_tag
def tokens_of(bill: pricing.Bill | None):
    """A bill's tokens (input + output), each kind in its title."""
    if bill is None:
        return ""
    title = (
        f"{bill.input_tokens:,} input ({bill.cache_read_tokens:,} cache read, {bill.cache_write_tokens:,} cache write), "
        f"{bill.output_tokens:,} output ({bill.reasoning_tokens:,} reasoning)"
    )
    return format_html('<span class="tokens" title="{}">{}</span>', title, token_count(bill.tokens))
