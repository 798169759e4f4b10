import hashlib
import json
import re

from django import template
from django.conf import settings

from sessions_app.log import clock as log_clock

register = template.Library()


@register.filter
def dom_id(value: object) -> str:
    """A DOM id safe in CSS selectors for any session or call id (which may hold ':' or '.')."""
    text = str(value)
    safe = re.sub(r"[^A-Za-z0-9_-]", "_", text)
    return safe if safe == text else f"{safe}-{hashlib.sha1(text.encode()).hexdigest()[:8]}"


@register.filter
def seconds(value: float | None) -> str:
    """A duration in words: 850 ms, 12.4 s, 3 min 5 s, 2 h 4 min, 334 d 4 h."""
    if value is None:
        return ""
    if value < 1:
        return f"{value * 1000:.0f} ms"
    if value < 60:
        return f"{value:.1f} s"
    minutes, secs = divmod(int(value), 60)
    if minutes < 60:
        return f"{minutes} min {secs} s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes} min"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h"


@register.filter
def pretty_json(value: object) -> str:
    """Indented JSON of a value (escaped by the template like any other text)."""
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


@register.filter
def json_text(value: object) -> str:
    """A value from event data as one line of text: a string as it is, anything else as compact
    JSON (never Python's repr: `{"a": true}`, not `{'a': True}`); None is empty. Escaped by the template."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


def seq_range(first: int, last: int, *, dash: str = "–") -> str:
    """A run of seqs as people read it: "seq 31" for one, "seqs 31–33" for more (the CLI's dash is "-")."""
    return f"seq {first}" if first == last else f"seqs {first}{dash}{last}"


@register.filter
def seqs(value, last=None) -> str:
    """`{{ pair|seqs }}` for a (first, last) pair, or `{{ first|seqs:last }}`: see seq_range."""
    first, last = (value[0], value[1]) if last is None else (value, last)
    return seq_range(first, last)


@register.filter
def as_value(data: object):
    """Event data shown as the transcript shows content (dashboard.transcript.Value): JSON, cut when long."""
    from dashboard import transcript  # the pages' module imports the models; templates load tags early

    return transcript.Value.of(data)


@register.filter
def at(mapping: dict | None, key: object) -> object:
    """mapping[key], or None: templates cannot index by a variable."""
    return (mapping or {}).get(key)


@register.simple_tag
def innermost_strategy(session):
    """The recommended strategy of a session's innermost open turn (sessions_app.log.strategy.TurnStrategy), or None."""
    from dashboard import transcript  # the pages' module imports the models; templates load tags early

    return transcript.innermost_strategy(session)


@register.simple_tag
def clock_skew(claimed, received) -> str:
    """ "clock ahead by 178 d" where a claimed time and its receive time differ by more than
    TURNLOG_CLOCK_SKEW_SECONDS, else "" (sessions_app.log.clock; pages and live frames alike)."""
    return log_clock.skew_note(claimed, received, settings.TURNLOG_CLOCK_SKEW_SECONDS)
