"""Small builders for events as agent runtimes send them."""


def event(type_: str, **data) -> dict:
    return {"type": type_, "data": data}


def user(content="hi") -> dict:
    return event("user_message", content=content, name=None, metadata={})


def assistant(content="", calls=(), metadata=None) -> dict:
    return event(
        "assistant_message",
        content=content,
        name=None,
        metadata=metadata or {},
        tool_calls=[{"id": c, "name": f"tool_{c}", "arguments": {"x": 1}} for c in calls],
    )


def tool_call(call_id: str) -> dict:
    return event("tool_call", id=call_id, name=f"tool_{call_id}")


def tool_result(call_id: str, content="ok") -> dict:
    return event("tool_result", tool_call_id=call_id, name=f"tool_{call_id}", content=content, metadata={})


def worked_example() -> list[dict]:
    """session-log.md section 4: a crash inside turn 1, step 2 (seqs 0-9)."""
    return [
        user(),
        event("turn_start", turn=1),
        event("step_start", turn=1, step=1),
        assistant(calls=["c1", "c2"]),
        tool_call("c1"),
        tool_result("c1"),
        event("step_end", turn=1, step=1, outcome="ok"),
        event("step_start", turn=1, step=2),
        assistant(calls=["c3"]),
        tool_call("c3"),
    ]
