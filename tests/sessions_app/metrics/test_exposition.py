"""GET /metrics in one process: who may scrape, and the numbers the services count (single-process mode)."""

from __future__ import annotations

import subprocess
from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from sessions_app import services, worker
from sessions_app.log.events import validate_batch
from sessions_app.metrics import multiprocess
from sessions_app.models import AutoRecoveryPolicy, Project, ToolPolicy
from tests.access import token_for
from tests.sessions_app import factories as f

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def single_process(monkeypatch):
    monkeypatch.delenv(multiprocess.ENVIRONMENT_VARIABLE, raising=False)


@pytest.fixture
def root(django_user_model):
    return django_user_model.objects.create_superuser("root", password="pw-root-1234")


@pytest.fixture
def site_token(root) -> str:
    return services.issue_token(user=root, project=None, scopes=["metrics"], name="prometheus")[1]


def scrape(client, token: str):
    return client.get("/metrics", headers={"Authorization": f"Bearer {token}"})


def samples(client, token: str) -> dict[tuple[str, tuple], float]:
    response = scrape(client, token)
    assert response.status_code == 200, response.content
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(response.content.decode())
        for s in family.samples
    }


def test_no_token_is_401_and_says_how_to_scrape(client):
    response = client.get("/metrics")
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert "site-level token with the 'metrics' scope" in response.content.decode()
    assert client.get("/metrics", headers={"Authorization": "Bearer tl_nothing"}).status_code == 401


def test_a_revoked_site_token_is_401_and_a_project_token_403(client, root, site_token, django_user_model):
    services.revoke_token(token=root.api_tokens.get(name="prometheus"))
    refused = scrape(client, site_token)
    assert refused.status_code == 401
    assert "was revoked" in refused.content.decode()

    project_token = token_for(django_user_model.objects.create_user("agent"))
    refused = scrape(client, project_token)
    assert refused.status_code == 403
    assert "project's token" in refused.content.decode()
    assert b"turnlog_" not in refused.content


def test_appends_forks_and_recoveries_move_the_counts(client, site_token, root, django_capture_on_commit_callbacks):
    before = samples(client, site_token)
    with django_capture_on_commit_callbacks(execute=True):
        services.create_session(session_id="m1")
        services.append_events(session_id="m1", events=validate_batch([f.user("a"), f.user("b"), f.assistant("c")]))
        services.append_events(session_id="m1", events=validate_batch([f.event("turn_start", turn=1), f.user("d")]))
        services.recover(session_id="m1", user=root)
        services.fork(session_id="m1")
    after = samples(client, site_token)

    def moved(name, **labels):
        key = (name, tuple(sorted(labels.items())))
        return after.get(key, 0) - before.get(key, 0)

    assert moved("turnlog_events_appended_total", type="user_message") == 3
    assert moved("turnlog_events_appended_total", type="assistant_message") == 1
    assert moved("turnlog_events_appended_total", type="turn_start") == 1
    assert moved("turnlog_events_appended_total", type="turn_end") == 1  # the recovery's
    assert moved("turnlog_append_seconds_count") == 2  # appends only: a recovery is not an append
    assert moved("turnlog_append_batch_events_sum") == 5
    assert moved("turnlog_append_batch_events_bucket", le="2.0") == 1
    assert moved("turnlog_recoveries_total", kind="manual") == 1
    assert moved("turnlog_recoveries_total", kind="automatic") == 0
    assert moved("turnlog_forks_total") == 1


def test_a_rolled_back_append_counts_nothing(client, site_token, django_capture_on_commit_callbacks):
    """Counted on commit: an append inside a transaction that rolls back (an import's, a caller's) is not."""
    services.create_session(session_id="m2")
    before = samples(client, site_token)

    class Abandoned(Exception):
        pass

    with django_capture_on_commit_callbacks(execute=True), pytest.raises(Abandoned), transaction.atomic():
        services.append_events(session_id="m2", events=validate_batch([f.user("a")]))
        raise Abandoned
    after = samples(client, site_token)
    assert after.get(("turnlog_events_appended_total", (("type", "user_message"),)), 0) == before.get(("turnlog_events_appended_total", (("type", "user_message"),)), 0)
    assert after[("turnlog_append_seconds_count", ())] == before[("turnlog_append_seconds_count", ())]


def test_sessions_by_status_per_project_from_the_summary(client, site_token):
    other = Project.objects.create(slug="other", name="Other")
    long_ago = timezone.now() - timedelta(hours=2)
    services.create_session(session_id="stalled")
    services.append_events(session_id="stalled", events=validate_batch([f.event("turn_start", turn=1)]), received_at=long_ago)
    services.create_session(session_id="running")
    services.append_events(session_id="running", events=validate_batch([f.event("turn_start", turn=1)]))
    services.create_session(session_id="quiet", project=other)
    services.append_events(session_id="quiet", events=validate_batch([f.user("hi")]), received_at=long_ago)

    found = {k: v for k, v in samples(client, site_token).items() if k[0] == "turnlog_sessions"}
    expected = {"default": {"running": 1, "stalled": 1}, "other": {"clean": 1}}
    assert found == {
        ("turnlog_sessions", (("project", slug), ("status", status))): expected[slug].get(status, 0)
        for slug in expected
        for status in ("running", "stalled", "active", "recovered", "clean")
    }


def test_promtool_accepts_the_output(client, site_token, promtool, tmp_path):
    services.create_session(session_id="m3")
    services.append_events(session_id="m3", events=validate_batch([f.user("a")]))
    body = scrape(client, site_token).content
    checked = subprocess.run([promtool, "check", "metrics"], input=body, capture_output=True, timeout=30)
    assert checked.returncode == 0, (checked.stdout + checked.stderr).decode()


def test_the_workers_recoveries_count_automatic_and_held(client, site_token, django_capture_on_commit_callbacks):
    """An agent past its policy's hourly limit: its first crash recovered by the worker, its second held for a person."""
    ToolPolicy.objects.create(pattern="lookup_*", side_effect=ToolPolicy.READ_ONLY)
    AutoRecoveryPolicy.objects.create(agent_pattern="indexer", max_per_hour=1)
    for session_id in ("crash-0", "crash-1"):
        services.create_session(session_id=session_id, agent_name="indexer")
        crashed = [
            f.user(),
            f.event("turn_start", turn=1),
            f.event("assistant_message", content="", name=None, metadata={}, tool_calls=[{"id": "c1", "name": "lookup_x", "arguments": {}}]),
            f.event("tool_call", id="c1", name="lookup_x"),
        ]
        services.append_events(session_id=session_id, events=validate_batch(crashed), received_at=timezone.now() - timedelta(hours=1))
    before = samples(client, site_token)
    with django_capture_on_commit_callbacks(execute=True):
        assert sorted(action.outcome for action in worker.run_round()) == [worker.HELD, worker.RECOVERED]
        assert worker.run_round() == []  # held once: not counted again
    after = samples(client, site_token)
    for kind, moved in {"automatic": 1, "held": 1, "manual": 0}.items():
        key = ("turnlog_recoveries_total", (("kind", kind),))
        assert after[key] - before[key] == moved, kind
