"""Which tool policy applies to a call (api.md, "Verdicts, receipts and reconcilers").

A project's policy wins over a site-wide one with the same pattern; among the
patterns that match a tool's name, an exact name wins, then the longest pattern.
A call whose tool no policy matches (or that names no tool) has class "unknown".
"""

import fnmatch
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

UNKNOWN_CLASS = "unknown"
EXTERNAL_EFFECT = "external_effect"
# A tool no policy classes may have acted outside as well: shown and ordered as external_effect is
# (its class word stays "unknown").
LOUD_CLASSES = frozenset({EXTERNAL_EFFECT, UNKNOWN_CLASS})
PROJECT, SITE = "project", "site"


@dataclass(frozen=True)
class Policy:
    pattern: str
    side_effect: str
    receipt_pointer: str = ""
    check_url: str = ""
    scope: str = SITE
    id: int | None = None
    note: str = ""


def effective(policies: Iterable[Policy]) -> list[Policy]:
    """The policies that apply in one project: its own, and the site's whose pattern it does not redefine."""
    policies = list(policies)
    own = {p.pattern for p in policies if p.scope == PROJECT}
    return [p for p in policies if p.scope == PROJECT or p.pattern not in own]


def matches(tool_name: str, pattern: str) -> bool:
    return pattern == tool_name or fnmatch.fnmatchcase(tool_name, pattern)


def matching(tool_name: str | None, policies: Sequence[Policy]) -> Policy | None:
    """The policy that decides for `tool_name` among effective policies: exact, then longest pattern."""
    if tool_name is None:
        return None
    found = [(p.pattern != tool_name, -len(p.pattern), p.scope != PROJECT, p.pattern) for p in policies if matches(tool_name, p.pattern)]
    if not found:
        return None
    best = min(found)
    return next(p for p in policies if p.pattern == best[3] and (p.scope != PROJECT) == best[2])


def side_effect_class(tool_name: str | None, policies: Sequence[Policy]) -> str:
    policy = matching(tool_name, policies)
    return policy.side_effect if policy is not None else UNKNOWN_CLASS
