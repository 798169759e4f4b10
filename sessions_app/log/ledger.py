"""The state of every sighted tool call, one word each, by the rules of api.md ("Calls, notes and search").

Every view that states a call (the ledger, the fleet page, the API, later the
transcript's cards) reads it here, so they cannot disagree. The rules, first
match wins:

1. A real result (neither synthetic nor written by a dangling-call patch) that
   comes after a synthetic or patch result: `superseded`.
2. The first real result: `error` when it says so, else `completed`.
3. Only synthetic (recovery) results: the risk the first one carries.
4. Only dangling-call patch results: `no_result`.
5. No result, owed by an open turn (the plan would repair it): `pending` while
   the session is running, else the risk the plan gives it.
6. No result, sighted outside every turn: `pending` while the session is running
   or active, else `no_result`.
7. No result, its turn closed (nested closed turns included): `no_result`.

A dangling-call patch writes `metadata: {}` and nothing else that tells its
results apart from a tool's (recovery.patch_dangling_tool_calls), so which
results a patch wrote is not in the log: the caller passes their seqs (storage
records each patch's range of seqs, and carries them to forks and imports).
Reading them from the text they carry would make a tool that says the same
words a patch.
"""

from collections.abc import Container, Sequence
from dataclasses import dataclass

from .calls import call_arguments
from .events import Event
from .recovery import COMPLETED, TOOL_NOT_STARTED, TOOL_OUTCOME_UNKNOWN, OwedCall, Sighting, calls_seen, is_synthetic

PENDING = "pending"
ERROR = "error"
SUPERSEDED = "superseded"
NO_RESULT = "no_result"
RISKS = (TOOL_NOT_STARTED, TOOL_OUTCOME_UNKNOWN)
STATES = (PENDING, COMPLETED, ERROR, SUPERSEDED, NO_RESULT, *RISKS)

# What wrote a tool_result, as rule 1 tells real results from the others.
REAL, SYNTHETIC, PATCH = "real", "synthetic", "patch"


@dataclass(frozen=True, slots=True)
class CallState:
    call_id: str
    name: object | None  # as log.calls reads it, at the call's first sighting
    arguments: object | None  # log.calls.call_arguments of the first sighting (None when absent)
    seq: int  # first sighting
    turn_seq: int | None  # the innermost turn it was first sighted in, None outside every turn
    state: str  # one of STATES
    # The result that decided `state` (for `superseded`, the late real result); None when none did.
    result_seq: int | None


def call_states(
    events: Sequence[Event], *, running: bool, active: bool, patch_seqs: Container[int]
) -> list[CallState]:
    """Every sighted call of the log (the whole log, from seq 0), in order of first sighting.

    `running` / `active` are the session's status words (a turn open and written to within
    the stall window / no turn open and an event received within it). `patch_seqs` holds the
    seqs of the tool_results dangling-call patches wrote; it has no default, as forgetting it
    would read every patch result as the tool's own (`completed`).
    """
    seen = calls_seen(events)
    owed = {r.call.id: r.call for r in seen.plan.repairs if r.call is not None}
    return [
        _state_of(sighting, seen.results.get(sighting.id, ()), owed.get(sighting.id), patch_seqs, running, active)
        for sighting in seen.sightings
    ]


def result_kind(result: Event, patch_seqs: Container[int]) -> str:
    """REAL, SYNTHETIC (recovery's, metadata.synthetic exactly true) or PATCH (a dangling-call patch's).

    The patch is asked first: it is known by where it was stored, whatever its data says.
    """
    if result.seq in patch_seqs:
        return PATCH
    return SYNTHETIC if is_synthetic(result.data) else REAL


def is_error(result: Event) -> bool:
    """`metadata.is_error` or `metadata.error` is true or non-empty (rule 2).

    Read to the letter: JSON true, or a non-empty string, list or object. A number is neither
    (`1` does not say error, `"false"` does: it is a non-empty string); metadata that is not an
    object says nothing.
    """
    metadata = result.data.get("metadata")
    if not isinstance(metadata, dict):
        return False
    return any(_says_error(metadata.get(key)) for key in ("is_error", "error"))


def _says_error(value: object) -> bool:
    return value is True or (isinstance(value, str | list | dict) and len(value) > 0)


def carried_risk(result: Event) -> str:
    """The risk a synthetic result carries (rule 3).

    Recovery always writes one of RISKS; anything else (an agent that marks its own result
    synthetic) reads as TOOL_OUTCOME_UNKNOWN, the reading that promises nothing, as the risk
    table's last row does.
    """
    metadata = result.data.get("metadata")
    risk = metadata.get("risk") if isinstance(metadata, dict) else None
    return risk if risk in RISKS else TOOL_OUTCOME_UNKNOWN


def _state_of(
    call: Sighting,
    results: Sequence[Event],
    owed: OwedCall | None,
    patch_seqs: Container[int],
    running: bool,
    active: bool,
) -> CallState:
    state, result_seq = _decide(call, results, owed, patch_seqs, running=running, active=active)
    return CallState(call.id, call.name, call_arguments(call.call), call.sighted_seq, call.turn_seq, state, result_seq)


def _decide(
    call: Sighting, results: Sequence[Event], owed: OwedCall | None, patch_seqs: Container[int], *, running: bool, active: bool
) -> tuple[str, int | None]:
    """(state, result_seq) by the first matching rule."""
    by_kind: dict[str, list[Event]] = {REAL: [], SYNTHETIC: [], PATCH: []}
    for result in results:  # in seq order
        by_kind[result_kind(result, patch_seqs)].append(result)
    stand_ins = by_kind[SYNTHETIC] + by_kind[PATCH]
    if by_kind[REAL]:
        first_real = by_kind[REAL][0]
        if any(r.seq < first_real.seq for r in stand_ins):  # rule 1
            return SUPERSEDED, first_real.seq
        return (ERROR if is_error(first_real) else COMPLETED), first_real.seq  # rule 2
    if by_kind[SYNTHETIC]:  # rule 3 (a patch result beside it adds nothing: the risk says more)
        first = by_kind[SYNTHETIC][0]
        return carried_risk(first), first.seq
    if by_kind[PATCH]:  # rule 4
        return NO_RESULT, by_kind[PATCH][0].seq
    if owed is not None:  # rule 5
        return (PENDING if running else owed.risk), None
    if call.turn_seq is None:  # rule 6
        return (PENDING if running or active else NO_RESULT), None
    return NO_RESULT, None  # rule 7: no open turn owes it, so its turn closed
