"""How far an agent's clock is off: the time it claimed for an event against when the server received it.

Turnlog keeps the claimed time as given and runs status, stall windows and
list order on the server's clock; this only says, where the two differ by
more than a tolerance, by how much ("clock ahead by 178 d").
"""

from __future__ import annotations

from datetime import datetime

# A unit's length in seconds and how it is written, largest first.
UNITS = ((365 * 86400, "y"), (86400, "d"), (3600, "h"), (60, "min"), (1, "s"))


def skew_seconds(claimed: datetime | None, received: datetime | None, tolerance: float) -> float | None:
    """claimed - received in seconds (positive: the clock is ahead), or None when either is
    unknown or they differ by no more than `tolerance` seconds."""
    if claimed is None or received is None:
        return None
    skew = (claimed - received).total_seconds()
    return skew if abs(skew) > tolerance else None


def amount(seconds: float) -> str:
    """A duration in its largest whole unit, rounded down: "178 d", "3 y", "6 min"."""
    seconds = abs(seconds)
    for length, unit in UNITS:
        if seconds >= length:
            return f"{int(seconds // length)} {unit}"
    return "0 s"


def skew_note(claimed: datetime | None, received: datetime | None, tolerance: float) -> str:
    """ "clock ahead by 178 d" / "clock behind by 3 y", or "" within the tolerance or when unknown."""
    skew = skew_seconds(claimed, received, tolerance)
    if skew is None:
        return ""
    return f"clock {'ahead' if skew > 0 else 'behind'} by {amount(skew)}"
