"""A notification's body names each owed call's verdict beside its risk (session-log.md 8.2)."""

import pytest
from django.utils import timezone

from sessions_app.models import Session
from sessions_app.services import verdicts as verdict_services
from sessions_app.services.notify import payload
from tests.sessions_app.log.test_recovery import WORKED_EXAMPLE
from tests.sessions_app.services.test_recovery import store

pytestmark = pytest.mark.django_db


def test_owed_calls_carry_their_verdict_and_the_slack_line_says_it():
    store(WORKED_EXAMPLE, session_id="crashed")
    verdict_services.record_reconciler_verdict(
        session_id="crashed", call_id="c3", pattern="ech*", outcome="not_happened", evidence="no such charge", external_ref="ch_9"
    )
    body = payload.build(Session.objects.get(pk="crashed"), "stalled", at=timezone.now())
    verdicts = {call["id"]: call["verdict"] for call in body["owed_calls"]}
    assert verdicts["c2"] is None
    assert {k: verdicts["c3"][k] for k in ("outcome", "evidence", "external_ref", "by")} == {
        "outcome": "not_happened", "evidence": "no such charge", "external_ref": "ch_9", "by": "reconciler:ech*",
    }  # fmt: skip
    assert [c["verdict"] for s in body["strategies"] for c in s["calls"] if c["id"] == "c3"] == ["not_happened"]
    text = payload.slack_text(body)["text"]
    assert "(c3): tool_outcome_unknown, verified not happened (reconciler:ech*: no such charge)" in text
