"""One call of a session as the API's Call shows it (after a verdict is recorded or withdrawn, or to read its history)."""

from __future__ import annotations

from dataclasses import replace

from sessions_app.lib.errors import CallNotFound
from sessions_app.models import LedgerCall, Session
from sessions_app.selectors.calls import CallRow
from sessions_app.selectors.ledger import call_rows, inherited_rows
from sessions_app.selectors.policies import project_policies
from sessions_app.selectors.verdicts import current_verdict

prep_call_id = LedgerCall._meta.get_field("call_id").get_prep_value


def call_row(session: Session, call_id: str) -> CallRow:
    """The call with its current verdict; a fork's call inherited from its parent's prefix counts (the
    fork's own verdicts apply). CallNotFound when the session never sighted it."""
    key = prep_call_id(call_id)
    row = LedgerCall.objects.filter(session=session, call_id=key).first()
    if row is None and session.seed_length:
        row = inherited_rows(session, {key}).get(key)
    if row is None:
        raise CallNotFound(session.id, call_id)
    (found,) = call_rows(session, [row], session.status, True, project_policies(session.project_id))
    return replace(found, verdict=current_verdict(session, key))
