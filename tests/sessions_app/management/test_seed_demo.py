"""seed_demo's crashed sessions teach what a crash costs: the first stalled one a newcomer opens asks for a check
by hand of an external call, and one crash is already settled by a reconciler's verdict."""

import io
import re

import pytest
from django.core.management import call_command

from sessions_app import selectors
from sessions_app.lib import demo
from sessions_app.log.strategy import HEADLINES, MANUAL_CHECK, RESTART_TURN
from sessions_app.management.commands.seed_demo import SETTLED_EVIDENCE, SETTLED_TOOL
from sessions_app.models import Role, Session, Verdict
from sessions_app.selectors.verdicts import current_verdict
from tests.access import member

pytestmark = pytest.mark.django_db


def stalled_newest_first() -> list[Session]:
    """The stalled sessions in the session list's order (the newest activity first)."""
    listed = Session.objects.order_by("-last_activity_at", "-id")
    return [s for s in listed if selectors.get_session(s.id).status == selectors.STALLED]


def test_the_first_stalled_demo_session_shows_its_unknown_external_call_to_check_by_hand(client, django_user_model):
    call_command("seed_demo", stdout=io.StringIO())
    first = stalled_newest_first()[0]
    user = django_user_model.objects.create_user("newcomer")
    member(user, Role.OPERATOR)
    client.force_login(user)

    page = client.get(f"/sessions/{first.id}/").content.decode()
    assert HEADLINES[MANUAL_CHECK] in page and HEADLINES[RESTART_TURN] not in page
    ledger = page.split('id="ledger-panel"', 1)[1].split("</section>", 1)[0]
    unknown = re.findall(r'class="ledger-row state-tool_outcome_unknown loud" data-call="([^"]+)"', ledger)
    assert unknown, ledger
    names = {row.call.call_id: row.call.name for row in selectors.session_calls(first, all_classes=True)}
    assert {demo.side_effect_class(names[call_id]) for call_id in unknown} == {"external_effect"}


def test_one_demo_crash_is_settled_by_a_reconciler_and_the_newest_is_left_to_a_person():
    output = io.StringIO()
    call_command("seed_demo", stdout=output)
    (verdict,) = Verdict.objects.all()
    assert (verdict.by, verdict.outcome, verdict.evidence, verdict.external_ref) == (
        f"reconciler:{SETTLED_TOOL}", "happened", SETTLED_EVIDENCE, "ch_demo_1"
    )  # fmt: skip
    stalled = stalled_newest_first()
    assert verdict.session_id != stalled[0].id and verdict.session_id in {s.id for s in stalled}
    assert current_verdict(Session.objects.get(id=verdict.session_id), verdict.call_id) == verdict
    assert f"{verdict.session_id} " in output.getvalue() and f"{SETTLED_TOOL} settled by reconciler" in output.getvalue()


def test_a_stalled_demo_scenario_leaves_an_external_call_unknown():
    for seed in (0, 50, 1007):
        scenario = demo.stalled_scenario(seed)
        assert scenario.crashes and set(map(demo.side_effect_class, demo.unknown_effects(scenario).values())) == {
            "external_effect"
        }  # fmt: skip
    assert SETTLED_TOOL in demo.unknown_effects(demo.stalled_scenario(3, tool=SETTLED_TOOL)).values()
    with pytest.raises(LookupError):
        demo.stalled_scenario(0, tool="get_weather")  # a read never needs a check
