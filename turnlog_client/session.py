"""`SessionWriter`: messages, turns, steps and tool calls written the way recovery reads them (session-log.md 3, 4).

    with client.writer("s1", agent_name="billing-bot") as session:
        session.user("Charge order 42")
        with session.turn():
            with session.step():
                session.assistant("", tool_calls=[{"id": "c1", "name": "charge", "arguments": {"order": 42}}])
                session.tool_call("c1", "charge", {"order": 42})  # stored before the tool runs
                session.tool_result("c1", charge(42), name="charge")

What is flushed at once (and why): an assistant message that requests tool
calls, each `tool_call`, each `tool_result`. Recovery decides an owed call's
risk from exactly these (rules 1-4): a dispatch must be on record before the
tool can have an effect, and a result as soon as there is one, or a process
that dies leaves a call that ran looking like one that may have run. The
rest (user and system messages, step and turn boundaries, plain assistant
messages) goes in batches.

An exception inside `step()` closes the step with `outcome: "error"` and the
error in its data. An exception inside `turn()`:

- if a call of the turn was dispatched (`tool_call`) and has no result, the
  turn is left open. Its outcome is unknown: the tool may have run, and only
  an open turn makes recovery owe the call (rule 1, `tool_outcome_unknown`);
  a turn_end would hide it (a closed turn's unanswered call reads
  `no_result`). The session reads stalled until someone recovers it.
- otherwise the turn ends with reason `rejected` and the error in its data.
  Not `complete` (it did not complete), and never `interrupted`: that reason
  is recovery's alone and finding it in a log is proof of a crash
  (session-log.md, section 3); a live loop ends a turn with complete or
  rejected. Calls the model asked for and that were never dispatched did not
  run (this writer records every dispatch first), so closing the turn hides
  nothing.

Callbacks that see a start and its end apart (a tracing processor's
`on_span_start` / `on_span_end`) use the explicit calls instead of the
context managers: `start_turn` / `end_turn(reason)`, `start_step` /
`end_step(outcome)`, `tool_call` when a tool starts, `tool_result` when it
ends; `event` (or `writer.add`) for anything else.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from turnlog_client.errors import FlushTimeout, retryable
from turnlog_client.types import StepOutcome, TurnEndReason
from turnlog_client.writer import _DEFAULT, Writer


@dataclasses.dataclass
class _Turn:
    number: int | None  # None: the log's turns could not be counted (the server away)
    steps: int = 0
    step_open: bool = False
    dispatched: list[str] = dataclasses.field(default_factory=list)  # ids with a tool_call, in order
    resulted: set[str] = dataclasses.field(default_factory=set)


def error_data(error: BaseException) -> dict[str, str]:
    return {"type": type(error).__name__, "message": str(error)[:2000]}


class SessionWriter:
    """The structure of a session's log on top of a Writer (`writer`). Not for use by several threads at once,
    except `tool_call` and `tool_result`, which parallel tools may call from their own threads.

    `turns` is how many turns the log already holds (`turn` numbers count every
    turn_start of the log); None counts them from the server when the first
    turn opens. A turn that opens while they cannot be counted (a spooled
    writer, the server away, and a log it has not read) has no number: its
    events carry no `turn` (session-log.md allows it), and the next turn
    tries again.
    """

    def __init__(self, writer: Writer, *, turns: int | None = 0):
        self.writer = writer
        self._turns = turns
        self._stack: list[_Turn] = []

    @property
    def session_id(self) -> str:
        return self.writer.session_id

    # Messages (surface events: what the model sees).

    def system(self, content: Any, *, name: str | None = None, metadata: Mapping[str, Any] | None = None, **fields: Any) -> None:
        self.writer.add("system_message", message(content, name, metadata, fields))

    def user(self, content: Any, *, name: str | None = None, metadata: Mapping[str, Any] | None = None, **fields: Any) -> None:
        self.writer.add("user_message", message(content, name, metadata, fields))

    def assistant(
        self, content: Any = "", *, tool_calls: Sequence[Mapping[str, Any]] = (), reasoning_content: Any = None,
        name: str | None = None, metadata: Mapping[str, Any] | None = None, **fields: Any,
    ) -> None:  # fmt: skip
        """The model's message; `tool_calls` as `{"id", "name", "arguments"}` (or OpenAI's chat shape).

        A message that requests calls is flushed: once the tools may start, the log must show what was asked.
        """
        data = message(content, name, metadata, fields) | {"tool_calls": [dict(c) for c in tool_calls]}
        if reasoning_content is not None:
            data["reasoning_content"] = reasoning_content
        self.writer.add("assistant_message", data)
        if tool_calls:
            self.writer.flush()

    def tool_call(self, call_id: str, name: str, arguments: Any = None, *, idempotency_key: str | None = None) -> None:
        """Record that the call is handed to its tool, and return once that is stored: call it right before the tool runs.

        `idempotency_key`: the key the tool call uses with the system it changes (a payment's
        Idempotency-Key, an order reference), kept in the event's `metadata` where the server
        reads it first (session-log.md section 1): the call's card shows it and `?ref=` finds it.
        """
        data: dict[str, Any] = {"id": call_id, "name": name}
        if arguments is not None:
            data["arguments"] = arguments
        if idempotency_key is not None:
            data["metadata"] = {"idempotency_key": idempotency_key}
        self.writer.add("tool_call", data)
        if self._stack:
            self._stack[-1].dispatched.append(call_id)
        self.writer.flush()

    def tool_result(
        self, call_id: str, content: Any, *, name: str | None = None, error: Any = None, metadata: Mapping[str, Any] | None = None,
        **fields: Any,
    ) -> None:  # fmt: skip
        """The tool's result, stored before this returns. `error` (True, or words) marks an error result (`metadata.error`)."""
        meta = dict(metadata or {})
        if error:
            meta["error"] = error
        self.writer.add("tool_result", message(content, name, meta, fields) | {"tool_call_id": call_id})
        for turn in self._stack:
            turn.resulted.add(call_id)
        self.writer.flush()

    def event(self, event_type: str, data: Mapping[str, Any], time: str | None = None) -> None:
        """Any event, as it is (the writer checks only what would refuse its batch)."""
        self.writer.add(event_type, data, time)

    # Turns and steps: explicit calls (for callbacks that see starts and ends apart), and context managers.

    def start_turn(self, **extra: Any) -> int | None:
        """Write turn_start; returns the turn's number (1-based, over the whole log), None when it cannot be known."""
        if self._turns is None:
            self._turns = self._count_turns()
        if self._turns is not None:
            self._turns += 1
        turn = _Turn(self._turns)
        self._stack.append(turn)
        self.writer.add("turn_start", numbered(turn) | extra)
        return turn.number

    def end_turn(self, reason: TurnEndReason = "complete", **extra: Any) -> None:
        """Write turn_end for the innermost open turn (`complete` or `rejected`: `interrupted` is recovery's)."""
        turn = self._current("end_turn")
        if turn.step_open:
            self.end_step("error", error={"type": "TurnEnded", "message": "the turn ended with this step open"})
        self._stack.pop()
        self.writer.add("turn_end", numbered(turn) | {"steps": turn.steps, "reason": reason, **extra})

    def start_step(self, **extra: Any) -> int:
        """Write step_start in the innermost open turn; returns the step's number within the turn."""
        turn = self._current("start_step")
        if turn.step_open:
            raise RuntimeError("a step is already open in this turn; end it first")
        turn.steps += 1
        turn.step_open = True
        self.writer.add("step_start", numbered(turn) | {"step": turn.steps, **extra})
        return turn.steps

    def end_step(self, outcome: StepOutcome = "ok", **extra: Any) -> None:
        turn = self._current("end_step")
        if not turn.step_open:
            raise RuntimeError("no step is open in this turn")
        turn.step_open = False
        self.writer.add("step_end", numbered(turn) | {"step": turn.steps, "outcome": outcome, **extra})

    @contextlib.contextmanager
    def turn(self, **extra: Any) -> Iterator[int | None]:
        """turn_start, then turn_end `complete`; after an exception, see this module's docstring."""
        number = self.start_turn(**extra)
        try:
            yield number
        except BaseException as error:
            self._close_turn_after(error)
            raise
        self.end_turn("complete")

    @contextlib.contextmanager
    def step(self, **extra: Any) -> Iterator[int]:
        """step_start, then step_end `ok`, or `error` (with the error) when an exception leaves the block."""
        number = self.start_step(**extra)
        try:
            yield number
        except BaseException as error:
            with contextlib.suppress(Exception):  # the writer's own failure must not hide the block's error
                self.end_step("error", error=error_data(error))
            raise
        self.end_step("ok")

    # The writer underneath.

    def flush(self, timeout: float | None = _DEFAULT) -> None:
        self.writer.flush(timeout)

    def close(self, timeout: float | None = _DEFAULT) -> None:
        self.writer.close(timeout)

    def __enter__(self) -> SessionWriter:
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        if exc is None:
            self.close()
            return
        with contextlib.suppress(Exception):  # keep the block's own exception the one that propagates
            self.close()

    def _current(self, what: str) -> _Turn:
        if not self._stack:
            raise RuntimeError(f"{what}: no turn is open (start one with turn() or start_turn())")
        return self._stack[-1]

    def _close_turn_after(self, error: BaseException) -> None:
        turn = self._stack.pop()
        with contextlib.suppress(Exception):  # the writer's own failure must not hide the block's error
            if turn.step_open:
                self.writer.add("step_end", numbered(turn) | {"step": turn.steps, "outcome": "error", "error": error_data(error)})
            unresolved = [call_id for call_id in turn.dispatched if call_id not in turn.resulted]
            if unresolved and self._stack:
                self._stack[-1].dispatched.extend(unresolved)  # an enclosing turn_end would close this one on the server
            elif not unresolved:
                self.writer.add("turn_end", numbered(turn) | {"steps": turn.steps, "reason": "rejected", "error": error_data(error)})
            self.writer.flush()

    def _count_turns(self) -> int | None:
        """turn_start events in the log: those the server has, and those this writer has not delivered yet;
        None while the server cannot tell (away, or the log's length unknown to a writer that started without it)."""
        next_seq, unsent = self.writer.unsent()
        if next_seq is None:  # the first delivered batch tells it: one flush, which returns at once while the server is away
            with contextlib.suppress(FlushTimeout):
                self.writer.flush()
            next_seq, unsent = self.writer.unsent()
            if next_seq is None:
                return None
        try:
            # Nothing to read below seq 0 (and a session still to be created has no events to read).
            events = self.writer.client.iter_events(self.session_id) if next_seq else iter(())
            stored = sum(1 for e in events if e["seq"] < next_seq and e["type"] == "turn_start")
        except Exception as error:
            if retryable(error):
                return None
            raise
        return stored + sum(1 for e in unsent if e["type"] == "turn_start")


def numbered(turn: _Turn) -> dict[str, int]:
    """The `turn` field of the turn's events: absent when its number is not known."""
    return {} if turn.number is None else {"turn": turn.number}


def message(content: Any, name: str | None, metadata: Mapping[str, Any] | None, fields: Mapping[str, Any]) -> dict[str, Any]:
    return {"content": content, "name": name, "metadata": dict(metadata or {}), **fields}
