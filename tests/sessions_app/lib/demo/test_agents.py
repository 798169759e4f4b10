import io

from django.core.management import call_command

from sessions_app.lib import demo


def test_seed_demo_lets_the_worker_recover_the_read_only_agent_and_no_other(db):
    from datetime import timedelta

    from django.utils import timezone

    from sessions_app import services, worker
    from sessions_app.log.events import validate_batch
    from sessions_app.models import AutoRecoveryPolicy, Session

    call_command("seed_demo", "--sessions", "0", stdout=io.StringIO())
    assert list(AutoRecoveryPolicy.objects.values_list("agent_pattern", flat=True)) == ["research-assistant"]
    start = timezone.now() - timedelta(hours=1)
    crashed = {}
    for seed in range(40):  # a crash of every demo agent, at the point where tools are running
        scenario = demo.scenario(seed, crash_rate=1.0)
        if scenario.agent_name in crashed.values() or scenario.crash_point != "tools_running":
            continue
        services.create_session(session_id=scenario.session_id, agent_name=scenario.agent_name, created_at=start)
        for batch in demo.timed_batches(scenario, start):
            events = validate_batch(batch)  # received when written, an hour ago, as seed_demo writes them
            services.append_events(session_id=scenario.session_id, events=events, received_at=events[-1].time)
        crashed[scenario.session_id] = scenario.agent_name
    assert "research-assistant" in crashed.values() and len(set(crashed.values())) > 1
    actions = worker.run_round()
    assert {a.session_id for a in actions if a.outcome == worker.RECOVERED} == {
        sid for sid, agent in crashed.items() if agent == "research-assistant"
    }
    assert not Session.objects.filter(agent_name="research-assistant", interrupted=True).exists()
    AutoRecoveryPolicy.objects.update(enabled=False)  # a person's edit
    call_command("seed_demo", stdout=io.StringIO())
    assert AutoRecoveryPolicy.objects.get().enabled is False
