"""An OpenAI Agents SDK `TracingProcessor` that writes each run into a Turnlog session as it happens.

    from agents import set_trace_processors
    from turnlog_client import Client
    from turnlog_client.agents import TurnlogProcessor

    set_trace_processors([TurnlogProcessor(Client(URL, TOKEN))])  # replaces the SDK's OpenAI exporter

Needs the optional extra `agents` (openai-agents 0.24): `pip install './turnlog_client[agents]'`.

Why a processor and not OTLP: the SDK tells a processor when a span *starts*.
An OTLP exporter sends a span only when it ends, so a process that dies inside
a tool leaves no trace of the call; here the `tool_call` is stored (flushed)
before the tool runs, and recovery owes that call as `tool_outcome_unknown`
(session-log.md, rule 1).

What maps to what:

- A trace is a turn, in the session named by the trace's `group_id`
  (`RunConfig(group_id=...)`), else by its trace id. A group id that is not a
  valid session id becomes a readable prefix plus a digest (the original is in
  the session's metadata). The turn opens at the trace's first agent, model,
  tool or handoff span (so a new session gets the agent's name) and ends when
  the trace ends: `complete`, or `rejected` with the error when an exception
  leaves the run (the SDK ends the trace from a `with` block, so the exception
  is the one being handled then; one that was already being handled when the
  run started, in the caller's `except` block, is not the run's). Run totals of the SDK's task span go to the
  turn_end's `metadata.usage`, never into the steps' sums.
- A model span (`ResponseSpanData`, `GenerationSpanData`) is a step: step_start
  when it starts; when it ends, the run's input user messages (first step
  only; a chat span's system message once per session), then the assistant message with the calls it requested and
  `metadata.usage` (input_tokens, output_tokens, cache_read_input_tokens,
  cache_creation_input_tokens, reasoning_tokens, total_tokens, model). The step
  ends when the next model span of the run starts, or the trace ends; a model
  span with an error ends it with outcome `error`.
- A function span is a call: `tool_call` flushed when it starts, `tool_result`
  when it ends (a span error, or an exception leaving it, in `metadata.error`).
  A span ended by a cancellation or KeyboardInterrupt gets no result: the tool
  may have run, so the call stays owed and the turn stays open (as
  `SessionWriter.turn()` does). A handoff span is written the same way for the
  handoff call, with `{"assistant": <new agent>}` as its result.
- Spans below a function span (an agent used as a tool runs in the same trace)
  are that tool's work: they write nothing.

Pairing a span with the model's call id (the SDK's function span carries only
the tool's name, and its arguments only when it ends): the calls a model span
requested are its output items that carry a `call_id` (Responses items; chat
messages' `tool_calls` ids), in output order. The SDK starts one tool task per
call in that order, and each task opens its function span before its first
await, so function spans start in output order. A function span therefore
takes the first not yet dispatched call of the run's latest model span whose
name (or `namespace.name`) is the span's name, else the first such call that
has no name (computer, shell, apply_patch calls); a handoff span takes the
first one that is not one of the agent's tools. A span that finds no call (no
recorded output: `trace_include_sensitive_data` off, or a run resumed after an
approval) uses its span id as the call id, so the dispatch is still on record.

Limits: runs of one session are expected one after another (overlapping runs
nest their turns, as session-log.md allows, and share its steps); a call
paused for human approval gets a function span that ends without output and
is written as a result without content.
"""

from __future__ import annotations

import collections
import hashlib
import json
import logging
import re
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

try:
    from agents.tracing import AgentSpanData, Span, Trace, TracingProcessor
except ImportError as error:  # the optional extra is not installed
    raise ImportError("turnlog_client.agents needs the OpenAI Agents SDK: pip install './turnlog_client[agents]'") from error

from turnlog_client.agent_spans import Call, dict_of, jsonable, kind_of, read_output, text_of, usage_in_output, usage_of
from turnlog_client.client import Client
from turnlog_client.session import SessionWriter, error_data

logger = logging.getLogger("turnlog_client.agents")
SESSION_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
# What the usage objects this processor writes say of their writer.
USAGE_SOURCE = "openai-agents"


def session_id_for(trace: Trace) -> tuple[str, str | None]:
    """(session id, the group id it stands for when that is not a valid session id itself)."""
    wanted = getattr(trace, "group_id", None) or trace.trace_id
    if SESSION_ID.fullmatch(wanted):
        return wanted, None
    readable = re.sub(r"[^A-Za-z0-9._:-]+", "-", wanted)[:60].strip("-") or "group"
    return f"{readable}-{hashlib.sha256(wanted.encode()).hexdigest()[:16]}", wanted


@dataclass
class _Session:
    id: str
    group_id: str | None
    lock: threading.RLock = field(default_factory=threading.RLock)
    writer: SessionWriter | None = None
    runs: list[_Run] = field(default_factory=list)  # runs whose turn is open, outermost first
    stuck: bool = False  # a turn was left open for owed calls: the turns around it cannot close either
    failed: bool = False  # the writer refused (logged once): this session writes nothing more
    wrote_system: bool = False


@dataclass
class _Run:
    """One trace: one turn."""

    trace_id: str
    workflow: str
    session: _Session
    agent: AgentSpanData | None = None
    turn_open: bool = False
    step_open: bool = False
    steps: int = 0
    calls: list[Call] = field(default_factory=list)  # requested by the latest model span
    spans: dict[str, str] = field(default_factory=dict)  # open span id -> kind ("ignored" below a tool)
    tools: dict[str, tuple[str, str, BaseException | None]] = field(default_factory=dict)  # span id -> (call id, name, ambient)
    owed: set[str] = field(default_factory=set)  # dispatched calls without a result
    usage: dict[str, Any] = field(default_factory=dict)  # run totals from the task span
    ended: tuple[str, dict] | None = None  # turn_end waiting for a later run's inner turn to close
    ambient: BaseException | None = None  # the exception being handled when the trace started, if any


class TurnlogProcessor(TracingProcessor):
    """Writes every traced run into Turnlog through `client` (see the module's docstring).

    `session_id`: a function of the trace giving the session id (default: its
    group id, else its trace id). `project` and `metadata` apply to sessions it
    creates. `writer_options` go to each session's Writer (batch_size,
    flush_interval, flush_timeout, backoff; not `spool`: a spool file holds one
    session, and this writes many).
    It never raises into the agent: failures are logged (logger
    "turnlog_client.agents") and the run carries on.
    """

    def __init__(
        self, client: Client, *, session_id: Callable[[Trace], str] | None = None, project: str | None = None,
        metadata: Mapping[str, Any] | None = None, idle_sessions: int = 16, **writer_options: Any,
    ):  # fmt: skip
        if "spool" in writer_options:
            raise TypeError("TurnlogProcessor writes many sessions; a spool file holds one (no spool= here)")
        self.client = client
        self.project, self.metadata = project, dict(metadata or {})
        self.writer_options = writer_options
        self._session_id = (lambda trace: (session_id(trace), None)) if session_id else session_id_for
        self._idle_limit = idle_sessions
        self._lock = threading.Lock()  # guards the three maps; each session's lock guards its runs and writer
        self._runs: dict[str, _Run] = {}
        self._sessions: dict[str, _Session] = {}
        self._idle: collections.OrderedDict[str, _Session] = collections.OrderedDict()  # writers kept for the next run

    # The SDK's calls: each one logs its own failure and returns.

    # An exception is the span's (or the run's) own only if it was not already being handled when
    # the span started: a run started inside the caller's `except` block sees that one all along.

    def on_trace_start(self, trace: Trace) -> None:
        self._guard("on_trace_start", self._trace_started, trace, sys.exc_info()[1])

    def on_trace_end(self, trace: Trace) -> None:
        self._guard("on_trace_end", self._trace_ended, trace, sys.exc_info()[1])

    def on_span_start(self, span: Span[Any]) -> None:
        self._guard("on_span_start", self._span_started, span, sys.exc_info()[1])

    def on_span_end(self, span: Span[Any]) -> None:
        self._guard("on_span_end", self._span_ended, span, sys.exc_info()[1])

    def force_flush(self) -> None:
        for session in self._all_sessions():
            self._write(session, lambda writer: writer.flush())

    def shutdown(self) -> None:
        for session in self._all_sessions():
            with session.lock:
                if session.writer is not None:
                    self._write(session, lambda writer: writer.close())
                    session.writer = None

    def _guard(self, what: str, handler: Callable[..., None], *args: Any) -> None:
        try:
            handler(*args)
        except Exception:
            logger.exception("turnlog: %s failed; the agent carries on", what)

    # Traces: turns.

    def _trace_started(self, trace: Trace, ambient: BaseException | None) -> None:
        session_id, group_id = self._session_id(trace)
        with self._lock:
            session = self._idle.pop(session_id, None) or self._sessions.get(session_id) or _Session(session_id, group_id)
            self._sessions[session_id] = session
            self._runs[trace.trace_id] = _Run(trace.trace_id, trace.name, session, ambient=ambient)

    def _trace_ended(self, trace: Trace, error: BaseException | None) -> None:
        with self._lock:
            run = self._runs.pop(trace.trace_id, None)
        if run is None:
            return
        error = None if error is run.ambient else error
        session = run.session
        with session.lock:
            if run.turn_open:
                if run.step_open and error is not None:
                    self._end_step(run, "error", error=error_data(error))
                elif run.step_open:
                    self._end_step(run, "ok")
                if run.owed or session.stuck:
                    # A call that may have run has no result: only an open turn makes recovery owe it.
                    logger.warning("turnlog: run %s leaves turn open in session %s (calls owed: %s)", run.trace_id, session.id, sorted(run.owed))
                    session.stuck = True
                    session.runs.remove(run)
                else:
                    extra: dict[str, Any] = {"metadata": {"usage": run.usage}} if run.usage else {}
                    if error is not None:
                        extra["error"] = error_data(error)
                    run.ended = ("rejected" if error is not None else "complete", extra)
                    self._close_ended_turns(session)
                self._write(session, lambda writer: writer.flush())
        self._release(session)  # outside the session's lock: it may take another session's to close its writer

    def _open_turn(self, run: _Run) -> SessionWriter | None:
        """The run's writer, writing its turn_start first if it has none yet."""
        session = run.session
        if run.turn_open:
            return session.writer if not session.failed else None
        run.turn_open = True
        if session.writer is None and not session.failed:
            metadata = self.metadata | ({"openai_agents_group_id": session.group_id} if session.group_id else {})
            agent_name = run.agent.name if run.agent is not None else None
            try:
                session.writer = self.client.writer(
                    session.id, agent_name=agent_name, metadata=metadata or None, project=self.project, **self.writer_options
                )
            except Exception:
                logger.exception("turnlog: could not open session %s; its runs are not recorded", session.id)
                session.failed = True
        session.runs.append(run)
        meta = {"openai_agents": {"trace_id": run.trace_id, "workflow_name": run.workflow}}
        self._write(session, lambda writer: writer.start_turn(metadata=meta))
        return session.writer if not session.failed else None

    def _close_ended_turns(self, session: _Session) -> None:
        """turn_end for the innermost runs that ended (an outer run that ended first waits for the inner ones)."""
        while session.runs and session.runs[-1].ended is not None and not session.stuck:
            reason, extra = session.runs.pop().ended  # type: ignore[misc]
            self._write(session, lambda writer: writer.end_turn(reason, **extra))

    def _release(self, session: _Session) -> None:
        """A session with no run left keeps its writer for the next run, up to `idle_sessions` of them."""
        closing: list[_Session] = []
        with self._lock:
            if any(run.session is session for run in self._runs.values()):
                return
            if session.stuck or session.failed:
                closing.append(session)  # a fresh writer starts clean (and counts the turns the server has)
                self._sessions.pop(session.id, None)
            else:
                self._idle[session.id] = session
            while len(self._idle) > self._idle_limit:
                _, oldest = self._idle.popitem(last=False)
                self._sessions.pop(oldest.id, None)
                closing.append(oldest)
        for old in closing:
            with old.lock:
                if old.writer is not None:
                    self._write(old, lambda writer: writer.close())
                    old.writer = None

    # Spans: steps and calls.

    def _span_started(self, span: Span[Any], ambient: BaseException | None) -> None:
        run = self._run_of(span)
        if run is None:
            return
        data = span.span_data
        with run.session.lock:
            parent = run.spans.get(span.parent_id or "")
            kind = "ignored" if parent in ("tool", "ignored") else kind_of(data)
            run.spans[span.span_id] = kind
            if kind == "agent":
                run.agent = data
                self._open_turn(run)
            elif kind == "model":
                if self._open_turn(run) is not None:
                    if run.step_open:
                        self._end_step(run, "ok")  # the next request: the last step's tools are done
                    run.step_open, run.steps, run.calls = True, run.steps + 1, []
                    self._write(run.session, lambda writer: writer.start_step())
            elif kind in ("tool", "handoff") and self._open_turn(run) is not None:
                call = self._pair(run, data, handoff=kind == "handoff")
                if call is None and kind == "handoff":
                    return  # not a call the model's recorded output asked for: nothing is owed
                name = (call.name if call else None) or getattr(data, "name", None) or kind
                call_id, arguments = (call.id, call.arguments) if call else (span.span_id, None)
                run.tools[span.span_id] = (call_id, name, ambient)
                run.owed.add(call_id)
                self._write(run.session, lambda writer: writer.tool_call(call_id, name, arguments))

    def _span_ended(self, span: Span[Any], error: BaseException | None) -> None:
        run = self._run_of(span)
        if run is None:
            return
        data = span.span_data
        with run.session.lock:
            kind = run.spans.pop(span.span_id, None)
            if kind == "model" and run.step_open and not run.session.failed:
                self._model_ended(run, span)
            elif kind in ("tool", "handoff") and span.span_id in run.tools:
                call_id, name, ambient = run.tools.pop(span.span_id)
                failure = jsonable(span.error) if span.error else None
                if failure is None and error is not None and error is not ambient:
                    if not isinstance(error, Exception):
                        return  # cancelled or interrupted inside the tool: it may have run, so the call stays owed
                    failure = error_data(error)
                if kind == "handoff" and failure is None:
                    content: Any = json.dumps({"assistant": data.to_agent})
                else:
                    content = text_of(data.output) if getattr(data, "output", None) is not None else None
                if content is None and failure is not None:
                    content = failure.get("message")
                self._write(run.session, lambda writer: writer.tool_result(call_id, content, name=name, error=failure))
                run.owed.discard(call_id)
            elif kind == "task" and getattr(data, "usage", None):
                run.usage = {**usage_of(data.usage), "source": USAGE_SOURCE}

    def _model_ended(self, run: _Run, span: Span[Any]) -> None:
        data = span.span_data
        content, calls, reasoning, model = read_output(data)
        if run.steps == 1:
            self._write_input(run, data.input)
        usage = usage_of(data.usage or usage_in_output(data))
        if model or getattr(data, "model", None):
            usage["model"] = getattr(data, "model", None) or model
        if usage:
            # The SDK's input_tokens count the cache, whatever the model: said, so that a Claude model's cache
            # reads are never added to them again (api.md, "Usage and cost").
            usage["source"] = USAGE_SOURCE
        metadata: dict[str, Any] = {"usage": usage} if usage else {}
        if span.error:
            metadata["error"] = jsonable(span.error)
        if content is not None or calls or not span.error:
            tool_calls = [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in calls]
            self._write(run.session, lambda writer: writer.assistant(content, tool_calls=tool_calls, reasoning_content=reasoning, metadata=metadata))
        run.calls = calls
        if span.error:
            self._end_step(run, "error", error=jsonable(span.error))

    def _write_input(self, run: _Run, given: Any) -> None:
        """The run's new user messages (the input's trailing ones) and, once per session, its system message."""
        items = [{"role": "user", "content": given}] if isinstance(given, str) else [dict_of(i) for i in given or ()]
        system = next((i for i in items if i.get("role") in ("system", "developer")), None)
        if system is not None and not run.session.wrote_system:
            run.session.wrote_system = True
            self._write(run.session, lambda writer: writer.system(system.get("content")))
        trailing: list[dict] = []
        for item in reversed(items):
            if item.get("role") != "user" or item.get("type", "message") != "message":
                break
            trailing.insert(0, item)
        for item in trailing:
            self._write(run.session, lambda writer: writer.user(item.get("content")))

    def _pair(self, run: _Run, data: Any, *, handoff: bool) -> Call | None:
        """The model's call this span executes (the rule is in the module's docstring)."""
        waiting = [c for c in run.calls if not c.dispatched]
        if handoff:
            tools = set(run.agent.tools or ()) if run.agent is not None else set()
            found = [c for c in waiting if c.name not in tools]
        else:
            found = [c for c in waiting if data.name in c.names] or [c for c in waiting if c.name is None]
        if found:
            found[0].dispatched = True
            return found[0]
        return None

    def _end_step(self, run: _Run, outcome: str, **extra: Any) -> None:
        run.step_open = False
        self._write(run.session, lambda writer: writer.end_step(outcome, **extra))  # type: ignore[arg-type]

    def _write(self, session: _Session, action: Callable[[SessionWriter], Any]) -> None:
        """Run one write on the session's writer; a failure is logged, and a writer that stopped is not used again."""
        if session.failed or session.writer is None:
            return
        try:
            action(session.writer)
        except Exception:
            stopped = session.writer.writer.failure is not None
            logger.exception("turnlog: writing to session %s failed%s", session.id, "; it writes nothing more" if stopped else "")
            session.failed = stopped

    def _run_of(self, span: Span[Any]) -> _Run | None:
        with self._lock:
            return self._runs.get(span.trace_id)

    def _all_sessions(self) -> list[_Session]:
        with self._lock:
            return list(self._sessions.values())
