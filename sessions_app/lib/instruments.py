"""The instruments: plain prometheus-client objects, counted where things happen (services, the live side).

A support module: it imports nothing of the project, so the writes and the live side may count with it
although the rest of this room is a door. With PROMETHEUS_MULTIPROC_DIR set (by the launcher, before
Python starts: prometheus-client reads it at import) every process writes its own files there and
/metrics adds them up (sessions_app.metrics.multiprocess).

Counted after commit (transaction.on_commit at the call sites): a rolled-back write counts nothing.
"""

from __future__ import annotations

from collections import Counter as Tally

from prometheus_client import Counter, Gauge, Histogram

EVENTS_APPENDED = Counter(
    "turnlog_events_appended", "Events stored after a session's last one (appends, recoveries, imports, OTLP), by type", ["type"]
)
APPEND_SECONDS = Histogram(
    "turnlog_append_seconds",
    "Time of a stored append, from its start to its commit and publishing (services.append_events)",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)
APPEND_BATCH_EVENTS = Histogram(
    "turnlog_append_batch_events",
    "Events per stored append",
    buckets=(1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 5000),
)
SOCKETS_OPEN = Gauge(
    "turnlog_websockets_open", "Websocket connections open, by kind (the route's stream)", ["kind"], multiprocess_mode="livesum"
)
FRAMES_SENT = Counter("turnlog_websocket_frames_sent", "Frames sent on websockets, by kind", ["kind"])
PUBLISH_FAILURES = Counter(
    "turnlog_layer_publish_failures",
    "Messages the channel layer did not take (the streams read what they missed from the database), by reason:"
    " unreachable (Redis down), error (anything else), stopping (the server's event loop had closed)",
    ["reason"],
)
STREAM_CATCH_UPS = Counter(
    "turnlog_stream_catch_ups",
    "Reads of a stream's events from the database that found some: backlog (a socket's start or reconnect), "
    "gap (a layer message skipped some) or poll (a write no message announced)",
    ["reason"],
)
RECOVERIES = Counter(
    "turnlog_recoveries",
    "Recoveries applied (manual, automatic) and automatic recoveries held for a person (repeated failures)",
    ["kind"],
)
FORKS = Counter("turnlog_forks", "Sessions forked")
WEBHOOK_DELIVERIES = Counter(
    "turnlog_webhook_deliveries",
    "Webhook delivery attempts (sessions_app/services/notify), by outcome: delivered, retry (another attempt is scheduled),"
    " failed (out of attempts), gone (a 410: the endpoint was disabled)",
    ["outcome"],
)
TOKENS = Counter(
    "turnlog_tokens",
    "Tokens of the model calls stored (assistant messages' usage), by kind (input counts its cache reads and writes,"
    " output its reasoning) and model",
    ["kind", "model"],
)
COST = Counter("turnlog_cost_usd", "USD cost of the model calls stored, at the prices when they were stored, by model", ["model"])
MODEL_CALLS = Counter("turnlog_model_calls", "Model calls stored with usage, by model and whether their tokens were priced", ["model", "priced"])
OTLP_SPANS = Counter("turnlog_otlp_spans", "OTLP spans received at /otlp/v1/traces, by outcome (accepted, rejected)", ["outcome"])

MANUAL, AUTOMATIC, HELD = "manual", "automatic", "held"
UNREACHABLE, ERROR, STOPPING = "unreachable", "error", "stopping"
# Known label values start at 0, so a scrape shows them (and a rate over them) before the first one happens.
for _kind in (MANUAL, AUTOMATIC, HELD):
    RECOVERIES.labels(_kind)
for _outcome in ("accepted", "rejected"):
    OTLP_SPANS.labels(_outcome)
for _outcome in ("delivered", "retry", "failed", "gone"):
    WEBHOOK_DELIVERIES.labels(_outcome)
for _reason in (UNREACHABLE, ERROR, STOPPING):
    PUBLISH_FAILURES.labels(_reason)


def count_events(types: Tally) -> None:
    """Count a commit's events, from a Counter of their types (no work per event here)."""
    for type_, n in types.items():
        EVENTS_APPENDED.labels(type_).inc(n)


# Model names are the agents' words: a label names a priced model, the first MODEL_LABELS_MAX of them a process
# meets; the rest, and every model no price knows, count as "other" (the pages name them).
MODEL_LABELS_MAX = 100
OTHER_MODEL, NO_MODEL = "other", "(no model)"
TOKEN_KINDS = ("input", "output", "cache_read", "cache_write", "reasoning")
_model_labels: set[str] = set()


def model_label(model: str, *, priced: bool) -> str:
    if not model:
        return NO_MODEL
    if not priced or (model not in _model_labels and len(_model_labels) >= MODEL_LABELS_MAX):
        return OTHER_MODEL
    _model_labels.add(model)
    return model


def count_usage(calls: dict[tuple[str, bool], tuple[int, list[int], float]]) -> None:
    """Count a commit's model calls: (model, priced) -> (calls, tokens of each of TOKEN_KINDS, cost in USD)."""
    for (model, priced), (n, tokens, cost) in calls.items():
        label = model_label(model, priced=priced)
        MODEL_CALLS.labels(label, "true" if priced else "false").inc(n)
        for kind, count in zip(TOKEN_KINDS, tokens):
            if count:
                TOKENS.labels(kind, label).inc(count)
        if cost:
            COST.labels(label).inc(cost)


def count_append(*, seconds: float, events: int) -> None:
    APPEND_SECONDS.observe(seconds)
    APPEND_BATCH_EVENTS.observe(events)


def count_spans(*, accepted: int, rejected: int) -> None:
    if accepted:
        OTLP_SPANS.labels("accepted").inc(accepted)
    if rejected:
        OTLP_SPANS.labels("rejected").inc(rejected)
