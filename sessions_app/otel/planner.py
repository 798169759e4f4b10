"""From readings to session-log events: the one place OTLP evidence becomes structure (docs/guide/otlp.md).

An OpenTelemetry SDK exports a span only when it ends, in batches, in any
order, sometimes twice; the log is append-only and pairs turns and steps by
structure (session-log.md section 4). So each span's events are written as
it arrives and never reordered, and every decision is made from what has
arrived so far:

- A trace is one run: one turn, opened on its first GenAI span. It closes
  (turn_end) only when it is the innermost open turn and its root span has
  arrived: when the trace has been quiet for the settle time (the closer), or
  at once when a new trace of the same session begins. A trace whose root
  never arrives (a crash) stays open, owed to recovery; a new run nests
  inside it, as section 3 allows.
- A model span is a step; every call it asks for gets a `tool_call` event
  (`metadata.inferred` unless its tool span was seen), because the absence of
  a span is never evidence that a tool did not run: recovery's rule 1 then
  says `tool_outcome_unknown`, and an early step close can never make it
  `tool_not_started` (rules 2 and 3).
- A tool span is its call's `tool_call` (if not written yet) and, once ended,
  its `tool_result`. A step closes when all its calls have results, when a
  later model span of its trace arrives, or when its turn closes; a
  `step_end` or `turn_end` is written only for the step or turn on top of its
  stack, so spans of overlapping runs never close each other's structure.
- Spans of a trace whose turn has closed (by its own root, or by recovery)
  are late: their messages and results are written, marked late, never a
  second turn and never a dispatch inside another run's turn.

Pure: the service loads the state, calls `take` for each reading, stores
`events` and saves the state.
"""

from __future__ import annotations

from collections.abc import Sequence

import orjson

from sessions_app.log import structure
from sessions_app.log.events import NewEvent

from .content import call_state, canonical, content_problem, digest, event_time, message_data, run_inputs, without_bytes
from .readings import AGENT, MODEL, OTHER, TOOL, Message, Reading
from .trace_state import TraceState


class Planner:
    """The events one session's log gets for the readings that arrive, given what it holds."""

    def __init__(
        self,
        *,
        next_seq: int,
        turn_stack: list[int],
        step_stack: list[int],
        turn_count: int,
        traces: dict[str, TraceState],
        seen: dict[tuple[str, str, bool], str] | set[tuple[str, str, bool]],
        system_digest: str | None = None,
        received: float = 0.0,
    ):
        self.next_seq = next_seq
        self.turn_stack = list(turn_stack)
        self.step_stack = list(step_stack)
        self.turn_count = turn_count
        self.traces = traces
        # Each span taken, with its digest ("" when not known: any content is then a repeat).
        self.seen: dict[tuple[str, str, bool], str] = dict.fromkeys(seen, "") if isinstance(seen, set) else dict(seen)
        self.system_digest = system_digest
        self.received = received
        self.events: list[NewEvent] = []
        self.touched: set[str] = set()  # trace ids whose state changed
        self.taken: list[tuple[str, str, bool, str]] = []  # (trace id, span id, pending, digest) newly taken

    # -- readings ------------------------------------------------------------

    def take(self, reading: Reading) -> str | None:
        """Write what `reading` adds; a reason when it is refused (nothing of it is written)."""
        key = (reading.trace_id, reading.span_id, reading.pending)
        if key in self.seen:
            if not reading.pending and reading.digest and self.seen[key] and self.seen[key] != reading.digest:
                return other_content(reading)
            return None  # a repeat (an exporter's retry)
        if reading.pending and (reading.trace_id, reading.span_id, False) in self.seen:
            return None  # the start of a span already ended
        trace = self.traces.get(reading.trace_id)
        if reading.role == OTHER and trace is None:
            return None  # no run of this trace is known: nothing to show (and nothing remembered)
        reading = without_bytes(reading)
        if (problem := content_problem(reading)) is not None:
            return problem
        self.seen[key] = reading.digest
        self.taken.append((*key, reading.digest))
        if trace is None:
            trace = self._open_trace(reading)
        self.touched.add(trace.trace_id)
        is_root = not reading.pending and self._is_root(trace, reading)
        trace.last_seen = max(trace.last_seen, self.received)
        if self._is_closed(trace):
            self._late(trace, reading)
        elif reading.role == MODEL:
            self._model(trace, reading)
        elif reading.role == TOOL:
            self._tool(trace, reading)
        if reading.role == AGENT and reading.aggregated_usage and (is_root or not trace.run_usage):
            trace.run_usage = dict(reading.aggregated_usage)
        if is_root and not trace.root_arrived:
            trace.root_span_id = reading.span_id
            trace.root_end_ns = reading.end_ns
            trace.root_error = reading.error
            trace.links = {}
        self._close_done_steps()
        return None

    def close_settled(self, *, now: float, settle: float) -> None:
        """Close the innermost turns whose root arrived and whose trace has been quiet for `settle` seconds."""
        self._close_ready_turns(lambda trace: now - trace.last_seen >= settle)

    def settle_due(self, *, now: float, settle: float) -> float | None:
        """Seconds until a turn here may be closed by `close_settled`, if one is waiting for its quiet time."""
        waiting = [t.last_seen + settle - now for t in self.traces.values() if t.root_arrived and not self._is_closed(t)]
        return max(0.0, min(waiting)) if waiting else None

    def _is_root(self, trace: TraceState, reading: Reading) -> bool:
        """Whether the span is its run's root: no parent, or a parent chain that comes back to it (its own
        parent, or a cycle of parent ids: nothing above it will ever arrive)."""
        parent = reading.parent_span_id
        if parent is None or parent == reading.span_id:
            return True
        if trace.root_arrived:
            return False
        trace.links[reading.span_id] = parent
        for _ in range(len(trace.links)):
            if parent == reading.span_id:
                return True
            if (parent := trace.links.get(parent)) is None:
                return False
        return parent == reading.span_id

    # -- turns ---------------------------------------------------------------

    def _open_trace(self, reading: Reading) -> TraceState:
        # A new run of the session: a finished run before it closes now, not after its settle time.
        # Only one that ended before this run began (by their own clocks): a run that overlaps it may
        # still have spans on the way, and they belong inside its turn.
        self._close_ready_turns(lambda trace: not reading.start_ns or reading.start_ns >= trace.root_end_ns)
        self.turn_count += 1
        trace = TraceState(trace_id=reading.trace_id, turn_number=self.turn_count, system_digest=self.system_digest)
        self.traces[trace.trace_id] = trace
        trace.turn_seq = self._emit(
            "turn_start", {"turn": trace.turn_number, "metadata": {"otel": {"trace_id": trace.trace_id}}}, reading.start_ns
        )
        return trace

    def _is_closed(self, trace: TraceState) -> bool:
        if not trace.closed and trace.turn_seq not in self.turn_stack:
            trace.closed = True  # recovery closed it
            self.touched.add(trace.trace_id)
        return trace.closed

    def _close_ready_turns(self, ready) -> None:
        by_turn = {t.turn_seq: t for t in self.traces.values() if not t.closed}
        while self.turn_stack and (trace := by_turn.get(self.turn_stack[-1])) is not None:
            if not (trace.root_arrived and ready(trace)) or self._hosts_owed_calls(trace):
                return
            self._close_turn(trace)

    def _hosts_owed_calls(self, host: TraceState) -> bool:
        """Whether calls of another run, sighted inside this turn, still lack results: closing it
        would hide them from recovery, which owes only the calls of open turns."""
        for owner_id, call_id in host.hosted:
            owner = self.traces.get(owner_id)
            if owner is not None and not owner.calls.get(call_id, {}).get("resulted", True):
                return True
        return False

    def _sight(self, trace: TraceState, call_id: str) -> None:
        """Note a call of `trace` written while another run's turn is the innermost one (see _hosts_owed_calls)."""
        if not self.turn_stack or self.turn_stack[-1] == trace.turn_seq:
            return
        host = next((t for t in self.traces.values() if t.turn_seq == self.turn_stack[-1]), None)
        if host is not None and [trace.trace_id, call_id] not in host.hosted:
            host.hosted.append([trace.trace_id, call_id])
            self.touched.add(host.trace_id)

    def _close_turn(self, trace: TraceState) -> None:
        for step in trace.steps.values():
            step["done"] = True
        self._close_done_steps()
        metadata: dict = {"otel": {"trace_id": trace.trace_id, "span_id": trace.root_span_id}}
        if trace.run_usage:
            metadata["usage"] = trace.run_usage
        if trace.root_error:
            metadata["error"] = trace.root_error
        # A live loop ends a turn complete or rejected; interrupted is recovery's word alone (section 3).
        reason = "rejected" if trace.root_error else "complete"
        data = {"turn": trace.turn_number, "steps": trace.step_count, "reason": reason, "metadata": metadata}
        self._emit("turn_end", data, trace.root_end_ns)
        trace.closed = True
        self.touched.add(trace.trace_id)

    # -- steps ---------------------------------------------------------------

    def _model(self, trace: TraceState, reading: Reading) -> None:
        step = trace.steps.get(reading.span_id)
        if step is None or not reading.pending:
            # A pending span carries no input: the ended span writes what it says, once.
            self._run_inputs(trace, reading)
        if step is None:
            trace.step_count += 1
            step = {"seq": None, "n": trace.step_count, "start_ns": reading.start_ns, "calls": [], "done": False, "ended": False, "error": False}
            trace.steps[reading.span_id] = step
            step["seq"] = self._emit("step_start", {"turn": trace.turn_number, "step": step["n"]}, reading.start_ns)
        # A later model span of the run means every earlier step is over (and this one, if it came late).
        for other_id, other in trace.steps.items():
            if other_id != reading.span_id and other["start_ns"] < reading.start_ns:
                other["done"] = True
            elif other_id != reading.span_id and other["start_ns"] > reading.start_ns and not reading.pending:
                step["done"] = True
        if reading.pending:
            return
        step["ended"] = True
        step["error"] = reading.error is not None
        calls = self._requested_calls(reading)
        self._assistant_messages(reading, calls, late=False)
        for call in calls:
            known = trace.calls.setdefault(call["id"], call_state(call["name"], call["arguments"]))
            known["step"] = reading.span_id
            if call["id"] not in step["calls"]:
                step["calls"].append(call["id"])
            self._sight(trace, call["id"])
            if not known["dispatched"]:
                # No start of the tool was seen: it may have run all the same (see the module's docstring).
                self._tool_call(call["id"], call["name"], call["arguments"], reading.end_ns, inferred=True, span_id=reading.span_id)
                known["dispatched"] = True
        if all(trace.calls[cid]["resulted"] for cid in step["calls"]):
            step["done"] = True

    def _run_inputs(self, trace: TraceState, reading: Reading) -> None:
        """The run's system instructions and user prompt, from a model span's input, written once."""
        system = reading.system_instructions
        if system is None:
            system_parts = [m.content for m in reading.input_messages if m.role == "system" and m.content is not None]
            system = system_parts[0] if len(system_parts) == 1 else (system_parts or None)
        if system is not None and (digest_ := digest(system)) != trace.system_digest:
            self._emit("system_message", message_data(system, {"otel": {"span_id": reading.span_id}}), reading.start_ns)
            trace.system_digest = self.system_digest = digest_
        for message in run_inputs(reading.input_messages):
            if message.role != "user":
                continue
            if (digest_ := digest([message.content, message.name])) not in trace.user_digests:
                trace.user_digests.append(digest_)
                data = message_data(message.content, {"otel": {"span_id": reading.span_id}}, name=message.name)
                self._emit("user_message", data, reading.start_ns)

    def _close_done_steps(self) -> None:
        """Write the step_end of every finished step on top of the step stack."""
        by_seq = {step["seq"]: (trace, step) for trace in self.traces.values() for step in trace.steps.values()}
        while self.step_stack and (found := by_seq.get(self.step_stack[-1])) is not None:
            trace, step = found
            if not step["done"]:
                return
            outcome = "error" if step["error"] else "ok"
            self._emit("step_end", {"turn": trace.turn_number, "step": step["n"], "outcome": outcome}, None)
            self.touched.add(trace.trace_id)

    # -- calls ---------------------------------------------------------------

    def _requested_calls(self, reading: Reading) -> list[dict]:
        calls = []
        for index, call in enumerate(reading.requested_calls):
            call_id = call.get("id")
            name = call.get("name")
            calls.append(
                {
                    # A call without an id cannot be owed or answered: give it one, stable across repeats.
                    "id": call_id if isinstance(call_id, str) and call_id else f"otel-{reading.span_id}-{index}",
                    "name": name if isinstance(name, str) else None,
                    "arguments": call.get("arguments"),
                }
            )
        return calls

    def _tool(self, trace: TraceState, reading: Reading) -> None:
        # The span's start named no call (Google ADK sets a tool span's attributes when it ends): the call
        # written for it then stands in for the one its end names, and is answered with it.
        stand_in = trace.tool_spans.get(reading.span_id) if reading.tool_call_id else None
        call_id = self._pair(trace, reading)
        known = trace.calls.setdefault(call_id, call_state(reading.tool_name, reading.tool_arguments))
        parent_step = trace.steps.get(reading.parent_span_id) if reading.parent_span_id else None
        if known["step"] is None and parent_step is not None and not parent_step["ended"]:
            # A model span that ends only after its tools (Google ADK, the Vercel AI SDK's ai.* spans), seen
            # started: the tool runs inside its step, which stays open while the call is owed.
            known["step"] = reading.parent_span_id
            parent_step["calls"].append(call_id)
        if not known["dispatched"]:
            self._sight(trace, call_id)
            self._tool_call(call_id, known["name"] or reading.tool_name, reading.tool_arguments, reading.start_ns, inferred=False, span_id=reading.span_id)
            known["dispatched"] = True
        if reading.pending or not reading.has_result:
            return  # started, or ended without a result (a deferred call): still owed
        if stand_in is not None and stand_in != call_id and not (stood := trace.calls[stand_in])["resulted"]:
            self._tool_result(stand_in, stood["name"] or reading.tool_name, reading, late=False, same_as=call_id)
            stood["resulted"] = True
        if known["resulted"]:
            return
        self._tool_result(call_id, known["name"] or reading.tool_name, reading, late=False)
        known["resulted"] = True
        step = trace.steps.get(known["step"]) if known["step"] else None
        if step is not None and step["ended"] and all(trace.calls[cid]["resulted"] for cid in step["calls"]):
            step["done"] = True

    def _pair(self, trace: TraceState, reading: Reading) -> str:
        """The call a tool span ran: its call id; else the model's unanswered call of the same name and
        arguments, else of the same name; else a call of its own (docs/guide/otlp.md, Tool spans without a call id)."""
        if reading.tool_call_id:
            return reading.tool_call_id
        if reading.span_id in trace.tool_spans:
            return trace.tool_spans[reading.span_id]
        claimed = set(trace.tool_spans.values())
        open_calls = [(cid, c) for cid, c in trace.calls.items() if not c["resulted"] and cid not in claimed]
        args = canonical(reading.tool_arguments)
        # OpenInference records a one-argument tool's input as the bare value: "Atlantis" for {"city": "Atlantis"}.
        match = next((cid for cid, c in open_calls if c["name"] == reading.tool_name and (args == c["args"] or args in c.get("only_value", ()))), None)
        if match is None:
            match = next((cid for cid, c in open_calls if c["name"] == reading.tool_name), None)
        call_id = match or f"otel-{reading.span_id}"
        trace.tool_spans[reading.span_id] = call_id
        return call_id

    def _tool_call(self, call_id, name, arguments, time_ns, *, inferred: bool, span_id: str) -> None:
        metadata: dict = {"otel": {"span_id": span_id}}
        if inferred:
            metadata["inferred"] = True
        data = {"id": call_id, "name": name, "metadata": metadata}
        if arguments is not None:
            data["arguments"] = arguments
        self._emit("tool_call", data, time_ns)

    def _tool_result(self, call_id, name, reading: Reading, *, late: bool, same_as: str | None = None) -> None:
        otel = {"span_id": reading.span_id, **({"late": True} if late else {}), **({"same_call_as": same_as} if same_as else {})}
        metadata: dict = {"otel": otel}
        content = reading.tool_result
        if reading.error is not None:
            metadata["error"] = reading.error
            if content is None:
                content = reading.error.get("message")
        if content is not None and not isinstance(content, str | list):
            content = orjson.dumps(content, option=orjson.OPT_NON_STR_KEYS).decode()
        self._emit("tool_result", {"tool_call_id": call_id, "name": name, "content": content, "metadata": metadata}, reading.end_ns)

    # -- late spans ----------------------------------------------------------

    def _late(self, trace: TraceState, reading: Reading) -> None:
        """A span of a run whose turn closed: what it says, never structure or a dispatch in another turn."""
        if reading.pending:
            return
        if reading.role == MODEL:
            self._assistant_messages(reading, self._requested_calls(reading), late=True)
        elif reading.role == TOOL:
            call_id = self._pair(trace, reading)
            known = trace.calls.setdefault(call_id, call_state(reading.tool_name, reading.tool_arguments))
            if reading.has_result and not known["resulted"]:
                self._tool_result(call_id, known["name"] or reading.tool_name, reading, late=True)
                known["resulted"] = True

    def _assistant_messages(self, reading: Reading, calls: list[dict], *, late: bool) -> None:
        otel: dict = {"span_id": reading.span_id}
        if late:
            otel["late"] = True
            if self.turn_stack:
                # Inside another run's open turn these calls would be owed by that turn: keep them aside.
                otel["tool_calls"], calls = calls, []
        messages = [m for m in reading.output_messages if m.role == "assistant"] or [Message("assistant")]
        if not calls and not reading.usage and reading.error is None and all(m.content is None for m in messages):
            return  # content off and nothing else to say: the step's markers carry the structure
        for index, message in enumerate(messages):
            last = index == len(messages) - 1
            metadata: dict = {"otel": otel}
            if last and reading.usage:
                metadata["usage"] = reading.usage
            if last and reading.error is not None:
                metadata["error"] = reading.error
            data = message_data(message.content, metadata, name=message.name)
            if message.reasoning_content is not None:
                data["reasoning_content"] = message.reasoning_content
            data["tool_calls"] = [{"id": c["id"], "name": c["name"], "arguments": c["arguments"]} for c in calls] if last else []
            self._emit("assistant_message", data, reading.end_ns)

    # -- writing -------------------------------------------------------------

    def _emit(self, type: str, data: dict, time_ns: int | None) -> int:
        seq = self.next_seq
        structure.place(self.turn_stack, self.step_stack, seq, type)
        self.events.append(NewEvent(type, data, event_time(time_ns)))
        self.next_seq += 1
        return seq


def other_content(reading: Reading) -> str:
    return (f"span {reading.span_id} of trace {reading.trace_id} was received before with other content: a span is "
            "sent once, and an exporter's retry repeats it exactly")


def ordered(readings: Sequence[Reading]) -> list[Reading]:
    """The order a batch's readings are taken in: runs in the order they started; within a run, spans
    by start (a span's start before its end) and its root last, so a batch holding a whole run writes
    its steps before the root can close it. Any order gives the same calls and results; this one
    gives the log a run's natural order."""
    first_start: dict[str, int] = {}
    for r in readings:
        first_start[r.trace_id] = min(first_start.get(r.trace_id, r.start_ns), r.start_ns)
    return sorted(
        readings,
        key=lambda r: (first_start[r.trace_id], r.trace_id, r.parent_span_id is None and not r.pending, r.start_ns, not r.pending),
    )
