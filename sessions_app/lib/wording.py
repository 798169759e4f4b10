"""How figures and values read in words, the same on the pages and in the commands' output.

Plain Python: the template filters of dashboard/templatetags register these functions
under the same names, and `manage.py sessions` prints with them.
"""

from __future__ import annotations

import json


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


def duration(value: float | None) -> str:
    """A time spent stalled: as `seconds` words it, "—" when none was recorded."""
    return "—" if value is None else seconds(value)


def percent(rate: float | None) -> str:
    """A crash rate in words: "25 %", "12.5 %", "< 0.1 %"; "—" without turns to divide by."""
    if rate is None:
        return "—"
    value = rate * 100
    if 0 < value < 0.05:
        return "< 0.1 %"
    return f"{value:.1f}".removesuffix(".0") + " %"


def agent_label(name: str) -> str:
    """How an agent name reads: the empty name (sessions created without one) is "(no agent name)"."""
    return name if name else "(no agent name)"


def strategy_counts(strategies) -> str:
    """(name, count) pairs as "restart_turn ×2, abandon ×1"; "—" when none."""
    return ", ".join(f"{name} ×{count}" for name, count in strategies) or "—"


def seq_range(first: int, last: int, *, dash: str = "–") -> str:
    """A run of seqs as people read it: "seq 31" for one, "seqs 31–33" for more (the CLI's dash is "-")."""
    return f"seq {first}" if first == last else f"seqs {first}{dash}{last}"


def json_text(value: object) -> str:
    """A value from event data as one line of text: a string as it is, anything else as compact
    JSON (never Python's repr: `{"a": true}`, not `{'a': True}`); None is empty. Escaped by the template."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


def verdict_words(verdict) -> str:
    """A current verdict as every view says it after the state word: "verified not happened (vera: bank portal, no wire; ref X)"."""
    found = "happened" if verdict.outcome == "happened" else "not happened"
    ref = f"; ref {verdict.external_ref}" if verdict.external_ref else ""
    return f"verified {found} ({verdict.by}: {verdict.evidence}{ref})"
