"""Stored costs priced again (services/usage.py recompute_costs): after a project's price changes through its
service, after a new bundled price list, a bounded number a round, and nothing read when nothing is stale; and the
real `manage.py recovery_worker` process doing it at its default interval within 60 s of a price change."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from sessions_app import services
from sessions_app.log import pricing
from sessions_app.log.events import validate_batch
from sessions_app.models import Project, Role, Session
from sessions_app.selectors import access
from sessions_app.selectors import usage as usage_reads
from sessions_app.services import prices, usage
from tests.access import member
from tests.servers import PROJECT_DIR, database_url
from tests.sessions_app import factories as f

AT = datetime(2026, 11, 2, 10, 15, tzinfo=UTC)
MILLION = {"input_tokens": 1_000_000, "output_tokens": 1_000_000}


def write(session_id: str, model: str, *, project: Project | None = None) -> Session:
    services.create_session(session_id=session_id, agent_name="bot", project=project)
    event = f.assistant("answer", metadata={"usage": MILLION, "model": model})
    event["time"] = AT.isoformat()
    services.append_events(session_id=session_id, events=validate_batch([event]))
    return Session.objects.get(pk=session_id)


@pytest.fixture
def admin(django_user_model) -> access.Actor:
    user = django_user_model.objects.create_user("alice")
    member(user, Role.ADMIN)
    return access.Actor(user=user)


def set_house_price(admin: access.Actor, rate: str) -> None:
    prices.set_price(actor=admin, project_slug="default", model="house-9", valid_from=AT.replace(minute=0), input=rate, output=rate)


@pytest.mark.django_db
def test_a_price_set_through_the_service_prices_the_stored_cost_again_and_removing_it_unprices_it(admin):
    write("s", "house-9")
    set_house_price(admin, "3")
    assert usage.recompute_costs() == 1
    session = Session.objects.get(pk="s")
    assert (session.cost, session.priced, session.unpriced) == (Decimal(6), True, [])
    prices.remove_price(actor=admin, project_slug="default", model="house-9", valid_from=AT.replace(minute=0))
    assert usage.recompute_costs() == 1
    session.refresh_from_db()
    assert (session.cost, session.priced, session.unpriced) == (Decimal(0), False, ["house-9"])


@pytest.mark.django_db
def test_a_new_bundled_price_list_makes_every_stored_cost_stale(monkeypatch):
    other = Project.objects.create(slug="other", name="Other")
    write("a", "gpt-4o")
    write("b", "house-9", project=other)
    services.create_session(session_id="quiet", agent_name="bot")  # no tokens: nothing to price
    assert usage.recompute_costs() == 0
    monkeypatch.setattr(pricing, "BUNDLED", "genai-prices 99.0.0")
    assert sorted(usage.stale_costs(Project.default().pk, 0, limit=10) + usage.stale_costs(other.pk, 0, limit=10)) == ["a", "b"]
    assert usage.recompute_costs() == 2 and usage.recompute_costs() == 0
    assert set(Session.objects.filter(tokens__gt=0).values_list("cost_basis", flat=True)) == {"genai-prices 99.0.0; project prices v0"}


@pytest.mark.django_db
def test_a_round_prices_at_most_its_limit_and_the_next_round_the_rest(admin):
    for n in range(5):
        write(f"s{n}", "house-9")
    set_house_price(admin, "1")
    assert [usage.recompute_costs(limit=2) for _ in range(4)] == [2, 2, 1, 0]
    assert set(Session.objects.values_list("cost", flat=True)) == {Decimal(2)}


@pytest.mark.django_db
def test_with_nothing_stale_a_round_reads_one_query_per_project_and_no_session():
    write("s", "gpt-4o")
    Project.objects.create(slug="other", name="Other")
    with CaptureQueriesContext(connection) as queries:
        assert usage.recompute_costs() == 0
    assert len(queries) == 1 + 2
    assert all("UNION" in q["sql"] for q in queries[1:])


@pytest.mark.django_db(transaction=True)
def test_the_worker_process_prices_the_stored_cost_again_within_60_seconds_of_a_price_change(admin, tmp_path):
    write("s", "house-9")
    Session.objects.filter(pk="s").update(cost_basis="before")  # stale: the worker's first round prices it
    env = {"DATABASE_URL": database_url(connection.settings_dict), "PATH": "/usr/bin:/bin"}
    log = tmp_path / "worker.log"
    # The default interval (TURNLOG_WORKER_INTERVAL_SECONDS, 30 s): what a deployment runs.
    worker = subprocess.Popen(
        [sys.executable, "manage.py", "recovery_worker"], cwd=PROJECT_DIR, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT
    )
    today = usage_reads.basis(0)

    def wait_for(condition, seconds: float) -> float:
        start = time.monotonic()
        while not condition():
            assert worker.poll() is None, log.read_text()
            assert time.monotonic() - start < seconds, log.read_text()
            time.sleep(0.25)
        return time.monotonic() - start

    try:
        wait_for(lambda: Session.objects.get(pk="s").cost_basis == today, 60)
        set_house_price(admin, "2.5")
        assert usage_reads.session_bill(Session.objects.get(pk="s")).cost == Decimal(5)  # reads: at once
        wait_for(lambda: Session.objects.get(pk="s").cost == Decimal(5), 60)
    finally:
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=30) == 0, log.read_text()
    session = Session.objects.get(pk="s")
    assert session.priced and session.cost_basis == usage_reads.basis(1)
