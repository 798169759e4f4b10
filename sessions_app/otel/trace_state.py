"""What the log already holds of one OTLP trace (one run): the planner's memory between requests,
stored as JSON by the service (`OtlpTrace.state`)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class TraceState:
    """What the log already holds of one trace (stored as JSON by the service, `as_json` / `from_json`)."""

    trace_id: str
    turn_seq: int | None = None
    turn_number: int | None = None
    root_span_id: str | None = None
    root_end_ns: int = 0
    root_error: dict | None = None
    run_usage: dict = field(default_factory=dict)
    closed: bool = False
    last_seen: float = 0.0  # when the server received its latest span (epoch seconds): the settle clock
    step_count: int = 0
    # model span id -> {"seq", "n", "start_ns", "calls": [ids], "done", "ended", "error"}
    steps: dict = field(default_factory=dict)
    # call id -> {"name", "args", "step": model span id | None, "dispatched", "resulted"}
    calls: dict = field(default_factory=dict)
    tool_spans: dict = field(default_factory=dict)  # tool span id -> call id (spans without a call id)
    hosted: list = field(default_factory=list)  # [trace id, call id]: other runs' calls sighted inside this turn
    # span id -> parent span id, kept until the root arrives: a parent chain that loops has no root, so the
    # span that closes the loop is read as the root (a run left open forever otherwise).
    links: dict = field(default_factory=dict)
    user_digests: list = field(default_factory=list)
    system_digest: str | None = None

    @property
    def root_arrived(self) -> bool:
        return self.root_span_id is not None

    def as_json(self) -> dict:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}

    @classmethod
    def from_json(cls, data: dict) -> TraceState:
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})
