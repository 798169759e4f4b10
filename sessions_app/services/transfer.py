"""Transfer: a session made from an exported blob (version 1 or 2)."""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from sessions_app.log import blob as log_blob
from sessions_app.log import events as log_events
from sessions_app.models import Project, Session
from sessions_app.services import ledger

from .appends import create_session
from .event_rows import AGENT_NAME_MAX, store_events
from .notes import import_notes
from .verdict_transfer import import_verdicts


def import_blob(*, blob: object, session_id: str | None = None, project: Project | None = None) -> tuple[Session, list[str]]:
    """Create a session in `project` (default: the default project) from a version 1 or 2 blob; seqs are reassigned.

    A parent is kept only when it is in the same project (a link across
    projects would show one team's session to another). The blob's notes
    (an additive "notes" list) are kept, each pinned note following its
    event's new seq, their authors as text (services.notes.import_notes), and so
    are which results dangling-call patches wrote ("dangling_patch_seqs") and the
    calls' verdicts ("verdicts", withdrawn ones included: services.verdict_transfer)."""
    now = timezone.now()
    loaded = log_blob.read_blob(blob, now=now)
    warnings = list(loaded.warnings)
    exported = loaded.extra.get("session") if isinstance(loaded.extra.get("session"), dict) else {}
    agent_name = exported.get("agent_name") or (blob.get("agent_name") if isinstance(blob, dict) else None) or ""
    if not isinstance(agent_name, str) or len(agent_name) > AGENT_NAME_MAX:
        warnings.append(f"agent_name {log_events.show_json(agent_name)} is not a text of at most {AGENT_NAME_MAX} characters; imported without it")
        agent_name = ""
    project = project or Project.default()
    parent, seed_length = _importable_parent(loaded.extra.get("parent") or exported.get("parent"), project, warnings)
    with transaction.atomic():
        session = create_session(
            session_id=session_id, agent_name=agent_name, project=project, parent=parent, seed_length=seed_length
        )
        store_events(session, loaded.events, received_at=None)  # the server never received these as they happened
        if carried := log_blob.followed_patch_seqs(loaded, warnings):
            session.carried_patch_seqs = carried
            session.save(update_fields=["carried_patch_seqs"])
            ledger.track_patch(session, seqs=carried)  # store_events read those results as real
        import_notes(session, loaded.extra.get("notes"), loaded.follow_seq, warnings, now=now)
        import_verdicts(session, loaded.extra.get("verdicts"), warnings, now=now)
    return session, warnings


def _importable_parent(parent_ref: object, project: Project, warnings: list[str]) -> tuple[Session | None, int]:
    if not isinstance(parent_ref, dict) or not parent_ref.get("session_id"):
        return None, 0
    parent = Session.objects.filter(pk=str(parent_ref["session_id"]), project=project).first()
    seed_length = parent_ref.get("seed_length")
    if parent is None:
        warnings.append(f"parent session {parent_ref['session_id']!r} does not exist in this project; imported without a parent")
        return None, 0
    if not log_events.is_integer(seed_length) or not 0 <= seed_length <= parent.event_count:
        warnings.append(
            f"parent seed_length {log_events.show_json(seed_length)} is not an integer from 0 to the parent's"
            f" {parent.event_count} events; imported without a parent"
        )
        return None, 0
    return parent, seed_length
