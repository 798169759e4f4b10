"""The Timeline tab: a session's turns, steps, model calls and tool calls as bars on a time axis (server-rendered SVG).

`timeline_context` is every input of the `timeline` partial: a page load and a live frame
(dashboard.live.timeline) both take it, so a page kept open reads as a reload of it.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth.decorators import login_required
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone

from dashboard.pages import session as session_page
from dashboard.pages.sessions import session_or_404, session_rights
from sessions_app.lib.params import decimal_int
from sessions_app.log import pricing
from sessions_app.log import timeline as log_timeline
from sessions_app.models import Session
from sessions_app.selectors import timeline as timeline_reads
from sessions_app.selectors import usage as usage_reads

TAB = "timeline"
DETAIL_EVENTS = 5_000  # a longer session is drawn turn by turn; a zoom into a turn shows each step and call
ZOOM_LISTED = 200  # turns offered in the zoom's list; more are asked for by seq (the drawing's size stays bounded)
CRASHED_READ = 20  # crashed turns whose last-heard moment is read (the latest ones)
WIDTH = 1000.0  # the plot's width in SVG units (a column of aggregation is COLUMN of them)
COLUMN = 4.0  # about a pixel at common widths
PER_COLUMN = 2  # more bars of one lane starting in one column are drawn as one
ROW = 22.0
GUTTER = 110.0  # the track labels' room left of the plot
AXIS = 28.0  # the ticks' room under the plot
KIND_WORDS = {"turn": "turn", "step": "step", "model": "model call", "tool": "tool call"}
STATE_WORDS = {"open": "still running", "stalled": "open, never closed", "crashed": "interrupted (closed by recovery)", "done": ""}


@dataclass
class Drawn:
    """A bar as the partial draws it."""

    bar: log_timeline.Bar
    dom_id: str
    href: str
    title: str


def timeline_context(session: Session, *, turn: int | None) -> dict:
    """What the timeline partial shows: read now, laid out and priced now (a project's prices first). A session
    longer than DETAIL_EVENTS is drawn turn by turn (each turn's usage from the kept sums); a zoom reads one turn."""
    now = timezone.now()
    running = session.status == "running"
    whole_turns = turn is None and session.event_count > DETAIL_EVENTS
    bars = turns_only(session, now=now, running=running) if whole_turns else []
    if not whole_turns and (marks := timeline_reads.timeline_marks(session, turn=turn)):
        bars = log_timeline.bars_of(marks, now=now, running=running)
    price = log_timeline.priced(usage_reads.pricer_for(session.project_id))
    drawn = log_timeline.layout(bars, width=WIDTH, row=ROW, per_column=PER_COLUMN, column=COLUMN, price=price) if bars else None
    detail = reverse("session_detail", args=[session.id])
    here = reverse("session_timeline", args=[session.id])
    shown = [Drawn(b, dom_id(b), link(b, detail, here, zoomed=turn is not None), title(b)) for b in drawn.bars] if drawn else []
    turns = sorted(b.seq for b in bars if b.kind == "turn") if turn is None else []
    return {
        "whole_turns": whole_turns, "detail_events": DETAIL_EVENTS, "timeline": drawn, "drawn": shown, "zoom": turn, "zoom_turns": turns, "detail_url": detail, "timeline_url": here,
        "per_column": PER_COLUMN, "zoom_listed": ZOOM_LISTED, "gutter": GUTTER, "plot_width": WIDTH, "svg_height": (drawn.height if drawn else 0) + AXIS,
        "bar_height": ROW - 6, "slowest": slowest_rows(drawn, detail) if drawn else {},
        "crash_marks": [(x, w - x, b) for x, w, b in drawn.crashes] if drawn else [],
    }  # fmt: skip


def turns_only(session: Session, *, now, running: bool) -> list[log_timeline.Bar]:
    """A bar per turn, with its usage from the kept sums and, for a turn recovery closed, when its agent was
    last heard from (read from that turn's events: few turns crash)."""
    rows = timeline_reads.turn_summaries(session)
    reasons = timeline_reads.turn_end_reasons(session, [r["end_seq"] for r in rows if r["end_seq"] is not None])
    summaries = [
        log_timeline.TurnSummary(
            r["turn_seq"], r["first"], r["last"], r["events"], r["steps"], r["calls"], r["ended"],
            reason if isinstance(reason := reasons.get(r["end_seq"]), str) else None,
        )
        for r in rows
    ]  # fmt: skip
    bars = log_timeline.turn_bars(summaries, now=now, running=running)
    usages = timeline_reads.turn_usages(session, [b.seq for b in bars])
    for bar in bars:
        bar.usages = usages.get(bar.seq, [])
    crashed = [b for b in bars if b.state == log_timeline.CRASHED][-CRASHED_READ:]
    for bar in crashed:
        own = log_timeline.bars_of(timeline_reads.timeline_marks(session, turn=bar.seq), now=now, running=running)
        bar.heard = next((b.heard for b in own if b.kind == log_timeline.TURN), None)
    return bars


def dom_id(bar: log_timeline.Bar) -> str:
    return f"tl-{bar.kind}-{bar.seq}" + ("-many" if bar.count > 1 else "")


def link(bar: log_timeline.Bar, detail: str, here: str, *, zoomed: bool) -> str:
    """A bar's card in the transcript (#seq-N reaches any event, on whatever page of its turn); an aggregate in the
    whole session's timeline zooms into its turn instead."""
    if bar.count > 1 and not zoomed and bar.turn is not None:
        return f"{here}?turn={bar.turn}"
    return f"{detail}#seq-{bar.seq}"


def title(bar: log_timeline.Bar) -> str:
    """The hover text: name, kind, model, duration, tokens and cost."""
    kind = KIND_WORDS[bar.kind]
    parts = [f"{bar.name} ({kind}, seq {bar.seq})" if bar.count == 1 else f"{bar.name} from seq {bar.seq}"]
    if bar.models:
        parts.append("model " + ", ".join(bar.models))
    parts.append(log_timeline.duration_text(bar.seconds) + (" so far" if bar.state == "open" else ""))
    if STATE_WORDS.get(bar.state):
        parts.append(STATE_WORDS[bar.state])
    if bar.bill is not None:
        parts.append(tokens_text(bar.bill))
        parts.append(cost_text(bar.bill))
    if bar.count > 1:
        parts.append("zoom into its turn to see each" if bar.turn is not None else "")
    return " · ".join(p for p in parts if p)


def tokens_text(bill: pricing.Bill) -> str:
    text = f"{bill.input_tokens:,} in, {bill.output_tokens:,} out tokens"
    if bill.cache_read_tokens or bill.cache_write_tokens:
        text += f" ({bill.cache_read_tokens:,} cache read, {bill.cache_write_tokens:,} cache write)"
    if bill.reasoning_tokens:
        text += f", {bill.reasoning_tokens:,} reasoning"
    return text


def cost_text(bill: pricing.Bill) -> str:
    """A cost only where every token is priced; else "partly priced" with what is missing (api.md)."""
    if bill.priced:
        return f"${pricing.text(bill.cost)}"
    return f"partly priced: ${pricing.text(bill.cost)} without {', '.join(bill.unpriced)}"


def slowest_rows(drawn: log_timeline.Timeline, detail: str) -> dict:
    def rows(bars):
        return [(b, f"{detail}#seq-{b.seq}", log_timeline.duration_text(b.seconds)) for b in bars]

    return {"steps": rows(drawn.slowest_steps), "tools": rows(drawn.slowest_tools), "turns": rows(drawn.slowest_turns)}


@login_required
def session_timeline(request, session_id: str):
    seen_at = timezone.now()  # before the reads: the live socket catches up from here (dashboard/live/seen.py)
    session = session_or_404(request, session_id)
    rights = session_rights(request, session)
    context = {**session_page.header_context(session, can_fork=rights["can_fork"], tab=TAB), **rights, "seen_at": seen_at}
    asked = request.GET.get("turn", "")
    turn = decimal_int(asked, name="turn")
    if asked and (turn is None or not timeline_reads.turn_exists(session, turn)):
        error = f"?turn= must be the seq of a turn_start of this session (its first event); {asked[:40]!r} is not."
        return render(request, "sessions/timeline.html", {**context, "error": error}, status=400)
    return render(request, "sessions/timeline.html", {**context, **timeline_context(session, turn=turn)})
