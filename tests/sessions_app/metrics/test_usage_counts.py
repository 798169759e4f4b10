"""Tokens, model calls and cost in GET /metrics: counted on commit of appends, by kind and model, with model labels
bounded (agent-supplied names no price knows count as "other", and a process names at most MODEL_LABELS_MAX)."""

from __future__ import annotations

import pytest
from django.db import transaction

from sessions_app import services
from sessions_app.lib import instruments
from sessions_app.log.events import validate_batch
from tests.sessions_app import factories as f
from tests.sessions_app.metrics.test_exposition import root, samples, single_process, site_token  # noqa: F401  (fixtures)

pytestmark = pytest.mark.django_db

USAGE = {"input_tokens": 1_000_000, "output_tokens": 2_000_000, "input_tokens_details": {"cached_tokens": 400_000}}


def calls(*models: str) -> list[dict]:
    return [f.assistant("a", metadata={"usage": USAGE, "model": model}) for model in models]


def moved(after: dict, before: dict, name: str, **labels) -> float:
    key = (name, tuple(sorted(labels.items())))
    return after.get(key, 0) - before.get(key, 0)


def test_tokens_calls_and_cost_are_counted_by_kind_and_model_on_commit(client, site_token, django_capture_on_commit_callbacks):  # noqa: F811
    before = samples(client, site_token)
    with django_capture_on_commit_callbacks(execute=True):
        services.create_session(session_id="m")
        services.append_events(session_id="m", events=validate_batch(calls("gpt-4o", "gpt-4o", "home-brew-1")))
    after = samples(client, site_token)
    assert moved(after, before, "turnlog_tokens_total", kind="input", model="gpt-4o") == 2_000_000
    assert moved(after, before, "turnlog_tokens_total", kind="cache_read", model="gpt-4o") == 800_000
    assert moved(after, before, "turnlog_tokens_total", kind="output", model="other") == 2_000_000
    assert moved(after, before, "turnlog_model_calls_total", model="gpt-4o", priced="true") == 2
    assert moved(after, before, "turnlog_model_calls_total", model="other", priced="false") == 1
    # gpt-4o: $2.5 a million uncached input, $1.25 cached, $10 output.
    assert moved(after, before, "turnlog_cost_usd_total", model="gpt-4o") == pytest.approx(2 * (0.6 * 2.5 + 0.4 * 1.25 + 2 * 10))


def test_a_rolled_back_append_counts_nothing(client, site_token, django_capture_on_commit_callbacks):  # noqa: F811
    services.create_session(session_id="m")
    before = samples(client, site_token)
    with django_capture_on_commit_callbacks(execute=True), pytest.raises(RuntimeError), transaction.atomic():
        services.append_events(session_id="m", events=validate_batch(calls("gpt-4o")))
        raise RuntimeError("rolled back")
    assert moved(samples(client, site_token), before, "turnlog_model_calls_total", model="gpt-4o", priced="true") == 0


def test_model_labels_stop_at_the_cap(monkeypatch):
    monkeypatch.setattr(instruments, "_model_labels", {f"m{n}" for n in range(instruments.MODEL_LABELS_MAX)})
    assert instruments.model_label("m3", priced=True) == "m3"
    assert instruments.model_label("gpt-4o", priced=True) == "other"
    assert instruments.model_label("", priced=False) == "(no model)"
