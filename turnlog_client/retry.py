"""How long to wait before sending again: exponential backoff with jitter, never sooner than Retry-After."""

from __future__ import annotations

import dataclasses
import random


@dataclasses.dataclass(frozen=True, slots=True)
class Backoff:
    """`initial * multiplier**attempt` seconds, at most `maximum`, spread by +/- `jitter` (a fraction).

    Jitter keeps many clients that lost the same server from coming back in
    one burst. A server's Retry-After (429, 503) is a floor: the wait is
    never shorter than what the server asked for.
    """

    initial: float = 0.2
    maximum: float = 10.0
    multiplier: float = 2.0
    jitter: float = 0.2

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        base = min(self.maximum, self.initial * self.multiplier ** min(attempt, 64))
        base *= 1 + random.uniform(-self.jitter, self.jitter)
        return max(base, retry_after) if retry_after is not None else base
