"""Usage sums kept at append time (services/usage.py): per session, turn and agent hour, through forks,
imports of every writer's form, and stored costs priced again when prices change."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest

from sessions_app import services
from sessions_app.log.events import validate_batch
from sessions_app.models import AgentModelHour, ModelPrice, Project, Session, UsageSum
from sessions_app.selectors import usage as usage_reads
from sessions_app.services import usage
from tests.sessions_app import factories as f

pytestmark = pytest.mark.django_db

AT = datetime(2026, 11, 2, 10, 15, tzinfo=UTC)


def message(usage_object: dict, **metadata) -> dict:
    event = f.assistant("answer", metadata={"usage": usage_object, **metadata})
    event["time"] = AT.isoformat()
    return event


def write(session_id: str, events: list[dict]) -> Session:
    if not Session.objects.filter(pk=session_id).exists():
        services.create_session(session_id=session_id, agent_name="bot")
    services.append_events(session_id=session_id, events=validate_batch(events))
    return Session.objects.get(pk=session_id)


def test_a_turn_s_usage_is_summed_per_turn_session_and_agent_hour_and_run_totals_are_not_added():
    session = write("s", [
        f.user(),
        f.event("turn_start", turn=1),
        message({"prompt_tokens": 100, "completion_tokens": 20, "prompt_tokens_details": {"cached_tokens": 40}}, model="gpt-4o"),
        message({"input_tokens": 50, "output_tokens": 30, "output_tokens_details": {"reasoning_tokens": 10}}, model="gpt-4o"),
        f.event("turn_end", turn=1, steps=0, reason="complete", metadata={"usage": {"input_tokens": 999, "output_tokens": 999}}),
    ])  # fmt: skip
    assert (session.input_tokens, session.output_tokens, session.cache_read_tokens, session.reasoning_tokens) == (150, 50, 40, 10)
    assert session.tokens == 200 and session.models_used == ["gpt-4o"] and session.priced
    [row] = UsageSum.objects.filter(session_id="s")
    assert (row.turn_seq, row.calls, row.input_tokens, row.model) == (1, 2, 150, "gpt-4o")
    assert AgentModelHour.objects.get(agent_name="bot").output_tokens == 50
    bill = usage_reads.session_bill(session)
    assert session.cost == bill.cost > 0 and bill.as_api()["cost"] == format(bill.cost.normalize(), "f")


def test_an_anthropic_raw_form_counts_its_cache_in_input_and_an_unknown_model_is_partly_priced():
    session = write("s", [
        message({"input_tokens": 10, "cache_read_input_tokens": 1000, "cache_creation_input_tokens": 200, "output_tokens": 5},
                model="claude-sonnet-4-5"),
        message({"input_tokens": 7, "output_tokens": 3}, model="house-model-9"),
    ])  # fmt: skip
    assert (session.input_tokens, session.cache_read_tokens, session.cache_write_tokens) == (1217, 1000, 200)
    api = usage_reads.session_bill(session).as_api()
    assert api["priced"] is False and api["unpriced"] == ["house-model-9"] and api["models"] == ["claude-sonnet-4-5", "house-model-9"]
    # Sonnet 4.5 at $3 input, $0.30 cache read, $3.75 cache write, $15 output per million tokens.
    assert Decimal(api["cost"]) == (10 * 3 + 1000 * Decimal("0.3") + 200 * Decimal("3.75") + 5 * 15) / 1_000_000


def test_a_project_price_applies_at_once_to_reads_and_within_a_worker_round_to_the_stored_cost():
    session = write("s", [message({"input_tokens": 1_000_000, "output_tokens": 1_000_000}, model="house-model-9")])
    assert not session.priced and session.cost == 0
    project = Project.default()
    ModelPrice.objects.create(project=project, model="house-model-9", valid_from=AT.replace(minute=0), input=Decimal(2), output=Decimal(8))
    Project.objects.filter(pk=project.pk).update(prices_version=project.prices_version + 1)
    assert usage_reads.session_bill(session).as_api()["cost"] == "10" and usage_reads.session_bill(session).priced
    assert usage.recompute_costs() == 1
    session.refresh_from_db()
    assert session.cost == Decimal(10) and session.priced and usage.recompute_costs() == 0


def test_a_price_valid_from_a_later_hour_does_not_price_earlier_calls():
    session = write("s", [message({"input_tokens": 1_000_000, "output_tokens": 0}, model="house-model-9")])
    ModelPrice.objects.create(project=Project.default(), model="house-model-9", valid_from=AT.replace(hour=11, minute=0),
                              input=Decimal(2), output=Decimal(8))  # fmt: skip
    Project.objects.update(prices_version=1)
    assert usage_reads.session_bill(session).unpriced == ("house-model-9",)


def test_a_fork_inherits_the_usage_of_its_prefix_only():
    write("p", [
        f.user(), f.event("turn_start", turn=1), message({"input_tokens": 10, "output_tokens": 1}, model="gpt-4o"),
        f.event("turn_end", turn=1, steps=0, reason="complete"),
        f.user(), f.event("turn_start", turn=2), message({"input_tokens": 20, "output_tokens": 2}, model="gpt-4o"),
        f.event("turn_end", turn=2, steps=0, reason="complete"),
    ])  # fmt: skip
    child = services.fork(session_id="p", boundary=4)
    child.refresh_from_db()
    assert (child.input_tokens, child.output_tokens, child.tokens) == (10, 1, 11)
    assert list(UsageSum.objects.filter(session_id=child.pk).values_list("turn_seq", flat=True)) == [1]
    write(child.pk, [message({"input_tokens": 5, "output_tokens": 5}, model="gpt-4o")])
    assert Session.objects.get(pk=child.pk).tokens == 21 and Session.objects.get(pk="p").tokens == 33


def test_duration_runs_from_the_first_to_the_last_event_received():
    first = datetime(2026, 11, 2, 10, 0, tzinfo=UTC)
    services.create_session(session_id="s", agent_name="bot")
    services.append_events(session_id="s", events=validate_batch([f.user()]), received_at=first)
    services.append_events(session_id="s", events=validate_batch([f.user()]), received_at=first.replace(minute=2, second=3))
    session = Session.objects.get(pk="s")
    assert session.first_received_at == first and session.duration_ms == 123_000


def test_counts_too_large_for_a_column_are_stored_as_sent_and_add_nothing():
    huge = {"input_tokens": 2**63, "output_tokens": 10**20, "cache_read_input_tokens": 2**62}
    session = write("s", [message(huge, model="claude-sonnet-4-5")] * 3 + [message({"input_tokens": 4, "output_tokens": 1}, model="gpt-4o")])
    assert (session.input_tokens, session.output_tokens, session.cache_read_tokens, session.event_count) == (4, 1, 0, 4)


def test_a_model_name_longer_than_its_column_is_kept_to_the_column_s_length():
    session = write("s", [message({"input_tokens": 4, "output_tokens": 1}, model="m" * 500, provider="p" * 300)])
    [row] = UsageSum.objects.filter(session_id="s")
    assert row.model == "m" * 200 and row.provider == "p" * 100 and session.models_used == ["m" * 200]


def test_a_batch_with_more_turns_than_a_statement_holds_is_summed_whole(monkeypatch):
    monkeypatch.setattr(usage, "ROWS_PER_STATEMENT", 3)
    session = write("s", [message({"input_tokens": n, "output_tokens": 1}, model="gpt-4o") for n in range(1, 8)])
    assert UsageSum.objects.filter(session_id="s").count() == 7 and session.input_tokens == 28
    assert sum(UsageSum.objects.values_list("input_tokens", flat=True)) == 28
