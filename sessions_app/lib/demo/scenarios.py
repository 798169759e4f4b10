"""A scenario: one agent's session as the batches its runtime would send, built from a seed."""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sessions_app.lib.demo.agents import AGENTS, REJECTED_REQUESTS, Agent
from sessions_app.lib.demo.tools import ERROR_RATE, TOOLS, random_token, side_effect_class
from sessions_app.log import recovery
from sessions_app.log.events import Event, format_time

# Where a crashing scenario stops, inside its last turn:
CRASH_POINTS = {
    # after the model answered with calls and they were dispatched (tool_call events when
    # the agent logs them), before every result came back: outcome unknown
    "tools_running": "while its tools were running",
    # the step closed with an error before its calls were dispatched: they never ran
    "step_failed": "after a step failed before dispatching its calls",
    # after step_start, while waiting for the model: nothing owed but the turn_end
    "model_request": "while waiting for the model",
}


@dataclass(frozen=True)
class Scenario:
    session_id: str
    agent_name: str
    metadata: dict
    batches: list[list[dict]]  # wire events {"type", "data"}; one list = one append request
    pauses: list[float]  # simulated seconds the agent waits before sending each batch
    crashes: bool  # the log stops inside an open turn
    crash_point: str | None  # a CRASH_POINTS key when it crashes

    @property
    def events(self) -> list[dict]:
        return [event for batch in self.batches for event in batch]

    @property
    def duration(self) -> float:
        """Simulated seconds from the first batch to the last."""
        return sum(self.pauses)


def scenario(seed: int, *, crash_rate: float = 0.25, compaction_rate: float = 0.25) -> Scenario:
    """The session of `seed`; it crashes with probability `crash_rate` and compacts its
    history before the last turn with probability `compaction_rate`."""
    rng = random.Random(seed)
    agent = rng.choice(AGENTS)
    facts = _facts(rng)
    crash_point = rng.choice(sorted(CRASH_POINTS)) if rng.random() < crash_rate else None
    compacts = rng.random() < compaction_rate
    turns = rng.randint(3 if compacts else 1, 5)
    log = _Log(rng, agent)
    log.send(0.0, _message("system_message", agent.system))
    for turn in range(1, turns + 1):
        last = turn == turns
        if compacts and last:
            log.send(rng.uniform(2, 6), log.compaction())
        log.turn(turn, facts, crash_point if last else None)
    return Scenario(
        session_id=f"{agent.name}-{rng.getrandbits(32):08x}",
        agent_name=agent.name,
        metadata={"model": agent.model, "environment": rng.choice(["production", "staging"]), "demo_seed": seed},
        batches=log.batches,
        pauses=log.pauses,
        crashes=crash_point is not None,
        crash_point=crash_point,
    )


def unknown_effects(scenario: Scenario) -> dict[str, str]:
    """The calls its crash leaves with an unknown outcome that change the world outside (external_effect
    tools): call id -> tool name. Recovery's strategy for such a turn is manual_check."""
    logged = [Event(seq, e["type"], datetime(2000, 1, 1, tzinfo=UTC), e["data"]) for seq, e in enumerate(scenario.events)]
    owed = [repair.call for repair in recovery.plan(logged).repairs if repair.call]
    return {
        call.id: call.name for call in owed
        if call.risk == recovery.TOOL_OUTCOME_UNKNOWN and side_effect_class(call.name) == "external_effect"
    }  # fmt: skip


def stalled_scenario(seed: int, *, tool: str | None = None, compaction_rate: float = 0.25) -> Scenario:
    """The first crashing scenario from `seed` on that leaves a call of an external-effect tool (of `tool`,
    when given) with an unknown outcome: one a person has to check by hand."""
    for candidate in range(seed, seed + 1000):
        crashed = scenario(candidate, crash_rate=1.0, compaction_rate=compaction_rate)
        names = unknown_effects(crashed).values()
        if names and (tool is None or tool in names):
            return crashed
    raise LookupError(f"no demo scenario from seed {seed} leaves an unknown call of {tool or 'an external-effect tool'}")


def timed_batches(scenario: Scenario, start: datetime) -> list[list[dict]]:
    """The batches with explicit "time" values: the first batch at `start`, then its pauses."""
    timed, now = [], start
    for pause, batch in zip(scenario.pauses, scenario.batches, strict=True):
        now += timedelta(seconds=pause)
        timed.append([{**event, "time": format_time(now)} for event in batch])
    return timed


CONTENT_BEFORE_CALLS = ("", "", "Let me check.", "I'll look that up first.", "Working on it.")
CONTENT_BEFORE_PARALLEL_CALLS = ("", "Checking these in parallel.", "Let me gather a few things at once.")


def _facts(rng: random.Random) -> dict:
    """The things one session talks about, shared by its requests and tools."""
    first = rng.choice(["Dana", "Ravi", "Mei", "Jonas", "Amara", "Luis", "Sofia", "Kenji"])
    last = rng.choice(["Okafor", "Schmidt", "Tanaka", "Alvarez", "Novak", "Haddad", "Lindqvist"])
    cents = rng.randint(900, 48000)
    cities = rng.sample(["Lisbon", "Berlin", "Austin", "Osaka", "Nairobi", "Toronto", "Madrid"], 2)
    return {
        "customer": f"{first} {last}",
        "email": f"{first.lower()}.{last.lower()}@{rng.choice(['example.com', 'mail.test', 'corp.example'])}",
        "customer_id": f"cus_{random_token(rng, 14)}",
        "charge_id": f"ch_{random_token(rng, 14)}",
        "plan": rng.choice(["starter", "pro", "enterprise"]),
        "invoice": f"INV-{rng.randint(10000, 99999)}",
        "cents": cents,
        "amount": f"${cents / 100:,.2f}",
        "ticket": f"T-{rng.randint(1000, 9999)}",
        "service": rng.choice(["checkout-api", "auth-service", "billing-worker", "search-indexer"]),
        "version": f"v{rng.randint(1, 4)}.{rng.randint(0, 30)}.{rng.randint(0, 9)}",
        "path": rng.choice(["src/payments/client.py", "docs/methodology.md", "deploy/values.yaml", "logs/worker-3.log"]),
        "topic": rng.choice(["retrieval-augmented agents", "SSO login loops", "tool-use benchmarks", "webhook retries"]),
        "city": cities[0],
        "city2": cities[1],
        "deploy_to": rng.choice(["staging", "production"]),
        "fare_usd": rng.randint(180, 390),
        "depart": f"{rng.randint(6, 21):02d}:{rng.choice(['05', '30', '45'])}",
        "option_id": f"opt_{random_token(rng, 6)}",
    }


def _message(type_: str, content: str, **data) -> dict:
    return {"type": type_, "data": {"content": content, "name": None, "metadata": {}, **data}}


def _event(type_: str, **data) -> dict:
    return {"type": type_, "data": data}


@dataclass(frozen=True)
class _Call:
    id: str
    name: str
    arguments: dict
    output: str
    error: str | None  # the tool failed with this instead of giving its output
    latency: float


class _Log:
    """Builds one scenario's batches; seqs are known because the session starts empty."""

    def __init__(self, rng: random.Random, agent: Agent):
        self.rng, self.agent = rng, agent
        self.batches: list[list[dict]] = []
        self.pauses: list[float] = []
        self.count = 0  # the next seq
        self.asked: list[str] = []
        self.tools_used: set[str] = set()
        self.failures: list[str] = []  # the current turn's tool errors, for its final answer
        self.effects: list[str] = []  # the current turn's completed calls of tools that change something
        self.requests = rng.sample(agent.requests, len(agent.requests))  # taken in turn, so none repeats early

    def send(self, pause: float, *events: dict) -> None:
        self.batches.append(list(events))
        self.pauses.append(round(pause, 3))
        self.count += len(events)

    def compaction(self) -> dict:
        """A summary standing for everything after the system prompt so far (seqs 1..count-1)."""
        summary = (
            f"Summary of the conversation so far ({len(self.asked)} requests): "
            + " / ".join(text[:80] for text in self.asked)
            + f". Tools used: {', '.join(sorted(self.tools_used)) or 'none'}."
        )
        type_ = self.rng.choice(["system_message", "user_message"])
        return _message(type_, summary, surface_op=["replace", 1, self.count - 1], metadata={"compaction": True})

    def turn(self, turn: int, facts: dict, crash_point: str | None) -> None:
        rng = self.rng
        rejected = crash_point is None and rng.random() < 0.1
        request = self.requests[(turn - 1) % len(self.requests)]
        text = rng.choice(REJECTED_REQUESTS) if rejected else request.text.format(**facts)
        self.asked.append(text)
        self.failures, self.effects = [], []
        user_pause = 0.5 if turn == 1 else rng.uniform(20, 300)  # the user reads, then types
        self.send(user_pause, _message("user_message", text), _event("turn_start", turn=turn))
        if rejected:
            self.send(rng.uniform(0.1, 0.4), _event("turn_end", turn=turn, steps=0, reason="rejected"))
            return
        tool_steps = len(request.steps)
        # A crash hits a tool step, or for model_request any step including the final one.
        crash_step = rng.randint(1, tool_steps + (crash_point == "model_request")) if crash_point else None
        skipped: list[str] = []  # tools the agent did not call because an earlier one failed
        for step, names in enumerate(request.steps, start=1):
            # A turn that crashes gets there: no tool fails before its crash step.
            can_fail = crash_step is None or step >= crash_step
            if not self.tool_step(turn, step, names, facts, crash_point if step == crash_step else None, can_fail):
                return
            if self.failures:  # the model reads the error and stops instead of carrying on
                skipped = [name for later in request.steps[step:] for name in later]
                break
        step += 1
        self.send(0.05, _event("step_start", turn=turn, step=step))
        if crash_step == step:
            return
        reply = request.reply.format(**facts)
        if self.failures:
            reply = " ".join(
                [f"I could not finish: {'; '.join(self.failures)}."]
                + ([f"Already done: {', '.join(self.effects)}."] if self.effects else [])
                + ([f"Not attempted: {', '.join(skipped)}."] if skipped else [])
                + ["Please check before retrying."]
            )
        self.send(
            self.model_latency(),
            self.assistant(reply, []),
            _event("step_end", turn=turn, step=step, outcome="ok"),
            _event("turn_end", turn=turn, steps=step, reason="complete"),
        )

    def tool_step(
        self, turn: int, step: int, names: tuple[str, ...], facts: dict, crash_point: str | None, can_fail: bool
    ) -> bool:
        """One model request and the tools it calls in parallel; False when the log stops here."""
        rng = self.rng
        self.send(0.05, _event("step_start", turn=turn, step=step))
        if crash_point == "model_request":
            return False
        calls = []
        for name in names:
            tool = TOOLS[name]
            arguments, output = tool.run(rng, facts)
            error = rng.choice(tool.errors) if can_fail and rng.random() < ERROR_RATE else None
            calls.append(_Call(f"call_{random_token(rng, 24)}", name, arguments, output, error, rng.uniform(*tool.latency)))
        self.tools_used.update(names)
        assistant = self.assistant(
            rng.choice(CONTENT_BEFORE_PARALLEL_CALLS if len(calls) > 1 else CONTENT_BEFORE_CALLS),
            [{"id": call.id, "name": call.name, "arguments": call.arguments} for call in calls],
        )
        if crash_point == "step_failed":
            self.send(self.model_latency(), assistant, _event("step_end", turn=turn, step=step, outcome="error"))
            return False
        dispatched = [_event("tool_call", id=call.id, name=call.name) for call in calls]
        self.send(self.model_latency(), assistant, *(dispatched if self.agent.logs_dispatch else []))
        by_latency = sorted(calls, key=lambda call: call.latency)
        # A crash while tools run loses at least the slowest result.
        returned = by_latency[: rng.randrange(len(calls))] if crash_point == "tools_running" else by_latency
        self.failures += [f"{call.name} failed ({call.error})" for call in calls if call.error]
        self.effects += [
            call.name for call in returned if not call.error and side_effect_class(call.name) != "read_only"
        ]
        outcome = "error" if any(call.error for call in calls) else "ok"
        elapsed = 0.0
        for index, call in enumerate(returned):
            result = _message(
                "tool_result",
                f"Error: {call.error}" if call.error else call.output,
                tool_call_id=call.id,
                name=call.name,
                metadata={"duration_ms": round(call.latency * 1000), **({"is_error": True} if call.error else {})},
            )
            closes_step = crash_point is None and index == len(returned) - 1
            step_end = [_event("step_end", turn=turn, step=step, outcome=outcome)] if closes_step else []
            self.send(call.latency - elapsed, result, *step_end)
            elapsed = call.latency
        return crash_point is None

    def assistant(self, content: str, tool_calls: list[dict]) -> dict:
        rng = self.rng
        usage = {"input_tokens": rng.randint(800, 24000), "output_tokens": rng.randint(20, 900)}
        metadata = {"model": self.agent.model, "usage": usage}
        reasoning = {}
        if self.agent.reasons and rng.random() < 0.6:
            plan = f"call {', '.join(call['name'] for call in tool_calls)}" if tool_calls else "answer from the results"
            reasoning["reasoning_content"] = f"The user needs a concrete answer. I should {plan}, then check for errors."
        return _message("assistant_message", content, tool_calls=tool_calls, metadata=metadata, **reasoning)

    def model_latency(self) -> float:
        return self.rng.uniform(0.8, 6.0)
