"""A session's timeline: turns, steps, model calls and tool calls as bars on a time axis (pure, no Django).

Read from a few columns of each event (`Mark`): its type, claimed time, turn and step, call id, and for an
assistant message its usage and the calls it names. A model call runs from the event before it in its step
(or turn) to its message; a tool call from its dispatch (else the message naming it) to its first result.
A turn or step never closed runs to `now` (still running, or stalled); one closed by recovery (a turn_end
`interrupted`) runs to that turn_end and is drawn as crashed, with the last moment the agent was heard from.
Bars that overlap in time are put in lanes side by side, so parallel tool calls never hide each other, and
where more than `per_column` bars of a lane start in one column of the drawing they become one aggregate
bar that says how many it holds.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from decimal import Decimal

from .pricing import Bill, Pricer, bill
from .usage import Usage

TURN, STEP, MODEL, TOOL = "turn", "step", "model", "tool"
KINDS = (TURN, STEP, MODEL, TOOL)
LABELS = {TURN: "Turns", STEP: "Steps", MODEL: "Model calls", TOOL: "Tool calls"}
# How a bar ended: closed, still open (running, or stalled: never closed), or crashed (closed by recovery).
DONE, OPEN, STALLED, CRASHED = "done", "open", "stalled", "crashed"
MAX_LANES = 12  # lanes of one kind drawn; more parallel bars share the last
NICE_STEPS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800,
              3600, 7200, 10800, 21600, 43200, 86400, 172800, 604800)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Mark:
    """One event as the timeline reads it."""

    seq: int
    type: str
    at: datetime
    turn: int | None = None  # the turn_start seq of its innermost turn
    step: int | None = None  # the step_start seq of its step
    call_id: str | None = None  # a tool_call's or tool_result's
    name: str | None = None  # a tool_call's tool name
    usage: Usage | None = None  # an assistant_message's
    model: str | None = None  # an assistant_message's, with or without usage
    calls: tuple[tuple[str, str | None], ...] = ()  # an assistant_message's tool_calls: (id, name)
    reason: str | None = None  # a turn_end's
    synthetic: bool = False  # a tool_result written by recovery


@dataclass(slots=True)
class Bar:
    kind: str
    seq: int  # the event whose card the bar links to
    start: datetime
    end: datetime
    name: str
    state: str = DONE
    turn: int | None = None  # the turn_start seq it belongs to (zoom)
    usages: list[tuple[Usage, datetime]] = field(default_factory=list)
    heard: datetime | None = None  # a crashed turn's last event before recovery
    count: int = 1  # bars an aggregate holds
    lane: int = 0
    x: float = 0.0
    width: float = 0.0
    y: float = 0.0
    bill: Bill | None = None

    @property
    def seconds(self) -> float:
        return max((self.end - self.start).total_seconds(), 0.0)

    @property
    def models(self) -> list[str]:
        return list(dict.fromkeys(u.model for u, _ in self.usages if u.model))


@dataclass
class Timeline:
    start: datetime
    end: datetime
    width: float
    bars: list[Bar]
    tracks: list[tuple[str, int, float]]  # (label, lane, y) of each drawn row
    ticks: list[tuple[float, str]]
    gaps: list[tuple[float, float, str]]  # (x, width, how long)
    crashes: list[tuple[float, float, Bar]]  # (x heard, x recovered or now, the turn)
    slowest_steps: list[Bar]
    slowest_tools: list[Bar]
    slowest_turns: list[Bar]
    aggregated: int  # bars drawn inside aggregates
    total: int  # bars before aggregation
    height: float


def bars_of(marks: Sequence[Mark], *, now: datetime, running: bool = True) -> list[Bar]:
    """Every bar the marks make, in no drawn order (`running`: an open turn is still running, else stalled)."""
    marks = sorted(marks, key=lambda m: m.seq)
    open_state = OPEN if running else STALLED
    turn_ends = {m.turn: m for m in marks if m.type == "turn_end" and m.turn is not None}
    step_ends: dict[int, Mark] = {}
    for m in marks:
        if m.type == "step_end" and m.step is not None:
            step_ends.setdefault(m.step, m)
    by_turn: dict[int | None, list[Mark]] = defaultdict(list)
    step_usages: dict[tuple[int | None, int], list[tuple[Usage, datetime]]] = defaultdict(list)
    for m in marks:
        by_turn[m.turn].append(m)
        if m.usage is not None and m.step is not None:
            step_usages[(m.turn, m.step)].append((m.usage, m.at))

    def turn_close(turn: int | None) -> tuple[datetime, str]:
        ended = turn_ends.get(turn)
        if ended is None:
            return (now if turn is not None else marks[-1].at), open_state if turn is not None else DONE
        return ended.at, CRASHED if ended.reason == "interrupted" else DONE

    bars: list[Bar] = []
    for m in marks:
        if m.type == "turn_start" and m.turn == m.seq:
            end, state = turn_close(m.seq)
            heard = None
            if state == CRASHED:
                before = [e.at for e in by_turn[m.seq] if e.type not in ("turn_end", "step_end") and not e.synthetic]
                heard = max(before, default=m.at)
            usages = [(e.usage, e.at) for e in by_turn[m.seq] if e.usage is not None]
            bars.append(Bar(TURN, m.seq, m.at, max(end, m.at), "turn", state, m.seq, usages, heard))
        elif m.type == "step_start":
            ended = step_ends.get(m.seq)
            end, state = (ended.at, DONE) if ended is not None else turn_close(m.turn)
            bars.append(Bar(STEP, m.seq, m.at, max(end, m.at), "step", state, m.turn, step_usages.get((m.turn, m.seq), [])))
    bars += model_bars(by_turn)
    bars += tool_bars(marks, turn_close)
    return bars


@dataclass(frozen=True, slots=True)
class TurnSummary:
    """A turn read as a whole (a long session's overview): its times and what it holds."""

    seq: int
    first: datetime
    last: datetime
    events: int = 0
    steps: int = 0
    calls: int = 0
    ended: datetime | None = None
    reason: str | None = None


def turn_bars(turns: Iterable[TurnSummary], *, now: datetime, running: bool = True) -> list[Bar]:
    """A bar per turn from its summary, open turns to `now`, those closed by recovery crashed."""
    bars = []
    for t in turns:
        if t.ended is None:
            end, state = now, OPEN if running else STALLED
        else:
            end, state = t.ended, CRASHED if t.reason == "interrupted" else DONE
        name = f"turn of {t.steps} step{'s' * (t.steps != 1)}, {t.calls} tool call{'s' * (t.calls != 1)}, {t.events} events"
        bars.append(Bar(TURN, t.seq, t.first, max(end, t.first), name, state, t.seq))
    return bars


def model_bars(by_turn: dict[int | None, list[Mark]]) -> list[Bar]:
    """A model call per assistant message: from the event before it in its step (or its turn) to the message."""
    bars = []
    for turn, marks in by_turn.items():
        in_step: dict[int, datetime] = {}
        latest: datetime | None = None
        for m in marks:
            if m.type == "assistant_message":
                start = in_step.get(m.step) if m.step is not None else None
                start = start or latest or m.at
                name = m.model or (m.usage.model if m.usage else None) or "model call"
                bars.append(Bar(MODEL, m.seq, min(start, m.at), m.at, name, DONE, turn, [(m.usage, m.at)] if m.usage else []))
            if m.step is not None:
                in_step[m.step] = m.at
            latest = m.at
    return bars


def tool_bars(marks: Sequence[Mark], turn_close: Callable[[int | None], tuple[datetime, str]]) -> list[Bar]:
    """A tool call per call id: from its first dispatch (else the message naming it) to its first result."""
    began: dict[str, tuple[Mark, str | None, bool]] = {}  # id -> (where it began, name, dispatched)
    results: dict[str, Mark] = {}
    for m in marks:
        for cid, name in m.calls:
            if cid not in began:
                began[cid] = (m, name, False)
        if m.type == "tool_call" and m.call_id is not None:
            seen = began.get(m.call_id)
            if seen is None or not seen[2]:
                began[m.call_id] = (m, (seen[1] if seen else None) or m.name, True)
        elif m.type == "tool_result" and m.call_id is not None:
            results.setdefault(m.call_id, m)
    bars = []
    for cid, (m, name, _) in began.items():
        result = results.get(cid)
        if result is not None and result.seq > m.seq:
            end, state = result.at, CRASHED if result.synthetic else DONE
        else:
            end, state = turn_close(m.turn)
        bars.append(Bar(TOOL, m.seq, m.at, max(end, m.at), name or "(unnamed tool)", state, m.turn))
    return bars


def lanes(bars: Iterable[Bar]) -> int:
    """Give each bar the lowest lane free at its start (bars overlapping in time get different lanes); the lanes used."""
    ends: list[datetime] = []
    for bar in sorted(bars, key=lambda b: (b.start, b.seq)):
        lane = next((i for i, end in enumerate(ends) if end <= bar.start and not (end == bar.start == bar.end)), None)
        if lane is None:
            lane = len(ends)
            ends.append(bar.end)
        ends[lane] = max(ends[lane], bar.end)
        bar.lane = min(lane, MAX_LANES - 1)
    return min(len(ends), MAX_LANES)


def layout(
    bars: list[Bar], *, width: float = 1000.0, row: float = 22.0, per_column: int = 2, column: float = 1.0,
    price: Callable[[list[tuple[Usage, datetime]]], Bill] | None = None, start: datetime | None = None, end: datetime | None = None,
) -> Timeline:  # fmt: skip
    """The drawing: each bar's place (x and width in `width` units, y by kind and lane), aggregates where more than
    `per_column` bars of a lane start in one `column`, ticks, gaps, crash points, the slowest steps and tools."""
    start = start or min((b.start for b in bars), default=None) or datetime.fromtimestamp(0).astimezone()
    end = max(end or start, max((b.end for b in bars), default=start))
    span = max((end - start).total_seconds(), 1e-3)

    def x_of(at: datetime) -> float:
        return round((at - start).total_seconds() / span * width, 2)

    drawn: list[Bar] = []
    tracks: list[tuple[str, int, float]] = []
    aggregated = 0
    y = 0.0
    for kind in KINDS:
        mine = [b for b in bars if b.kind == kind]
        if not mine:
            continue
        for lane in range(lanes(mine)):
            tracks.append((LABELS[kind] if lane == 0 else "", lane, y))
            columns: dict[int, list[Bar]] = defaultdict(list)
            for bar in (b for b in mine if b.lane == lane):
                bar.x, bar.y = x_of(bar.start), y
                bar.width = max(round(x_of(bar.end) - bar.x, 2), 1.0)
                columns[int(bar.x // column)].append(bar)
            for found in columns.values():
                if len(found) > per_column:
                    drawn.append(aggregate(found, y))
                    aggregated += len(found)
                else:
                    drawn += found
            y += row
    if price is not None:
        for bar in drawn:
            if bar.usages:
                bar.bill = price(bar.usages)
    crashes = [(x_of(b.heard), x_of(b.end), b) for b in bars if b.kind == TURN and b.heard is not None]
    singles = bars
    return Timeline(
        start=start, end=end, width=width, bars=sorted(drawn, key=lambda b: (b.y, b.x)), tracks=tracks,
        ticks=ticks(span, width), gaps=gaps(bars, start, span, width), crashes=crashes,
        slowest_steps=slowest(singles, STEP), slowest_tools=slowest(singles, TOOL), slowest_turns=slowest(singles, TURN),
        aggregated=aggregated, total=len(bars), height=y,
    )  # fmt: skip


def aggregate(found: list[Bar], y: float) -> Bar:
    """One bar standing for `found` (all of one lane, one column): from the first start to the last end."""
    first = min(found, key=lambda b: (b.start, b.seq))
    last_end = max(b.end for b in found)
    right = max(b.x + b.width for b in found)
    states = {b.state for b in found}
    state = CRASHED if CRASHED in states else STALLED if STALLED in states else OPEN if OPEN in states else DONE
    usages = [u for b in found for u in b.usages]
    kept = [b.bill for b in found if b.bill is not None and not b.usages]
    return replace(
        first, end=last_end, name=f"{len(found)} {LABELS[first.kind].lower()}", state=state, usages=usages, count=len(found),
        width=max(round(right - first.x, 2), 1.0), y=y, heard=None, bill=combined(kept) if kept else None,
    )  # fmt: skip


def combined(bills: Iterable[Bill]) -> Bill:
    """Bills added up (a turn's kept sums, priced, in an aggregate of turns)."""
    bills = list(bills)
    kinds = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens")
    return Bill(
        **{kind: sum(getattr(b, kind) for b in bills) for kind in kinds},
        models=tuple(dict.fromkeys(m for b in bills for m in b.models)), cost=sum((b.cost for b in bills), Decimal(0)),
        unpriced=tuple(dict.fromkeys(m for b in bills for m in b.unpriced)),
    )  # fmt: skip


def slowest(bars: Iterable[Bar], kind: str, count: int = 5) -> list[Bar]:
    return heapq.nsmallest(count, (b for b in bars if b.kind == kind), key=lambda b: (b.start - b.end, b.seq))


def ticks(span: float, width: float, wanted: int = 8) -> list[tuple[float, str]]:
    """(x, label) of round instants from the start, about `wanted` of them."""
    step = next((s for s in NICE_STEPS if span / s <= wanted), NICE_STEPS[-1] * (span // (NICE_STEPS[-1] * wanted) + 1))
    out = []
    k = 0
    while k * step <= span + 1e-9:
        out.append((round(k * step / span * width, 2), duration_text(k * step)))
        k += 1
    return out


def gaps(bars: Iterable[Bar], start: datetime, span: float, width: float, least: float = 0.03) -> list[tuple[float, float, str]]:
    """Stretches in which no bar runs, of at least `least` of the span (and a second): (x, width, how long)."""
    spans = sorted(((b.start - start).total_seconds(), (b.end - start).total_seconds()) for b in bars)
    out = []
    reach = None
    for first, last in spans:
        if reach is not None and first - reach >= max(least * span, 1.0):
            out.append((round(reach / span * width, 2), round((first - reach) / span * width, 2), duration_text(first - reach)))
        reach = last if reach is None else max(reach, last)
    return out


def duration_text(seconds: float) -> str:
    """A duration as people read it: "0 s", "350 ms", "2.5 s", "4 min 10 s", "3 h 5 min"."""
    if seconds == 0:
        return "0 s"
    if seconds < 1:
        return f"{round(seconds * 1000)} ms"
    if seconds < 60:
        return f"{seconds:.1f}".rstrip("0").rstrip(".") + " s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min" + (f" {secs} s" if secs else "")
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h" + (f" {minutes} min" if minutes else "")


def priced(pricer: Pricer) -> Callable[[list[tuple[Usage, datetime]]], Bill]:
    """A bill of usages, pricing each (model, provider, hour) once with its tokens summed, as the kept sums are
    priced (selectors.usage): a bar holding thousands of model calls costs a few lookups of a price."""
    memo: dict[tuple, Decimal | None] = {}

    def price(usages: list[tuple[Usage, datetime]]) -> Bill:
        groups: dict[tuple, list[int]] = {}
        for usage, at in usages:
            key = (usage.model, usage.provider, at.replace(minute=0, second=0, microsecond=0))
            sums = groups.setdefault(key, [0, 0, 0, 0, 0])
            for i, count in enumerate((usage.input_tokens, usage.output_tokens, usage.cache_read_tokens, usage.cache_write_tokens, usage.reasoning_tokens)):
                sums[i] += count
        calls = [(Usage(*sums, model=model, provider=provider), hour) for (model, provider, hour), sums in groups.items()]
        return bill(calls, MemoPricer(pricer, memo))

    return price


class MemoPricer(Pricer):
    """A pricer answering a usage priced before from memory (the same bars are priced again in aggregates)."""

    def __init__(self, pricer: Pricer, memo: dict):
        self._pricer, self._memo = pricer, memo

    def cost(self, usage: Usage, at: datetime) -> Decimal | None:
        key = (usage, at)
        if key not in self._memo:
            self._memo[key] = self._pricer.cost(usage, at)
        return self._memo[key]
