"""The audit log's entries as people read them: each detail in words ("abandoned", "with
context", "note: ..."), each target (a session, a token, a member) linked to its page.

The detail each action records is written by sessions_app.services and access; a key
this module does not know (an action added later) still reads, as "key: value" in JSON.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from django.urls import NoReverseMatch, reverse

from sessions_app import selectors
from sessions_app.lib.wording import json_text, seq_range
from sessions_app.models import AuditEntry, Project
from sessions_app.selectors import access

SESSION_ACTIONS = {AuditEntry.RECOVERY, AuditEntry.DANGLING_PATCH, AuditEntry.FORK, AuditEntry.AUTO_RECOVERY_HELD, AuditEntry.ACCESS_DENIED}
PROJECT_TARGET_PREFIX = "project "  # access_denied on a project page, not a session


@dataclass(frozen=True)
class Phrase:
    """One phrase of an entry's detail: `lead` then `text`, the text linked when `url` is set."""

    text: str
    url: str | None = None
    lead: str = ""


@dataclass
class AuditRow:
    entry: AuditEntry
    target_url: str | None
    phrases: list[Phrase] = field(default_factory=list)


def audit_rows(project: Project, entries: list[AuditEntry]) -> list[AuditRow]:
    tokens, members = selectors.audit_targets(project, entries)
    return [AuditRow(entry, target_url(project, entry, tokens, members), phrases(entry)) for entry in entries]


def target_url(project: Project, entry: AuditEntry, tokens: dict[str, int], members: dict[str, int]) -> str | None:
    target = entry.target
    if not target:
        return None
    if entry.action in SESSION_ACTIONS and not target.startswith(PROJECT_TARGET_PREFIX):
        return session_url(target)
    if target in tokens and entry.action in (AuditEntry.TOKEN_CREATED, AuditEntry.TOKEN_REVOKED):
        return f"{reverse('project_tokens', args=[project.slug])}#token-{tokens[target]}"
    if entry.action == AuditEntry.TOOL_POLICY_CHANGED:
        return reverse("project_tools", args=[project.slug])
    if target in members and entry.action.startswith("member_"):
        return f"{reverse('project_members', args=[project.slug])}#member-{members[target]}"
    return None


def phrases(entry: AuditEntry) -> list[Phrase]:
    detail = dict(entry.detail) if isinstance(entry.detail, dict) else {"detail": entry.detail}
    words = WORDS.get(entry.action)
    said = words(entry, detail) if words else []
    # Whatever the words above did not take (popped) still shows, never as a Python repr.
    said += [Phrase(json_text(value), lead=f"{key}: ") for key, value in sorted(detail.items()) if not _blank(value)]
    return said


def _blank(value: object) -> bool:
    return value is None or value is False or value in ("", [], {})


def session_url(session_id: str, suffix: str = "") -> str | None:
    try:
        return reverse("session_detail", args=[session_id]) + suffix
    except NoReverseMatch:  # not a session id (an entry written before a rule changed)
        return None


def _note(detail: dict) -> list[Phrase]:
    note = detail.pop("note", "")
    return [Phrase(json_text(note), lead="note: ")] if note else []


def _appended(entry: AuditEntry, detail: dict) -> list[Phrase]:
    first, last = detail.pop("first_seq", None), detail.pop("last_seq", None)
    if not isinstance(first, int) or not isinstance(last, int):
        return []
    url = session_url(entry.target, f"?highlight={first}-{last}#seq-{first}")
    return [Phrase(seq_range(first, last), url=url, lead="appended ")]


def _recovery(entry: AuditEntry, detail: dict) -> list[Phrase]:
    said = _appended(entry, detail)
    strategies = detail.pop("strategies", None) or []
    if strategies:
        said.append(Phrase(", ".join(json_text(s) for s in strategies), lead="strateg" + ("y " if len(strategies) == 1 else "ies ")))
    if detail.pop("abandoned", False):
        said.append(Phrase("abandoned"))
    if detail.pop("context", False):
        said.append(Phrase("with context"))
    automatic, policy = detail.pop("automatic", False), detail.pop("policy", None)
    if automatic:
        said.append(Phrase(f"automatic, policy {json_text(policy)}" if policy else "automatic"))
    said += _note(detail)
    digest = detail.pop("digest", None)
    if digest:
        said.append(Phrase(json_text(digest)[:12] + "…", lead="plan "))
    return said


def _fork(entry: AuditEntry, detail: dict) -> list[Phrase]:
    child, seed_length = detail.pop("fork", None), detail.pop("seed_length", None)
    said = [Phrase(child, url=session_url(child), lead="into ")] if isinstance(child, str) and child else []
    if isinstance(seed_length, int):
        said.append(Phrase(f"inheriting {seq_range(0, seed_length - 1)}" if seed_length else "inheriting no events"))
    return said


def _token_created(entry: AuditEntry, detail: dict) -> list[Phrase]:
    said = _token_owner(detail)
    scopes = detail.pop("scopes", None) or []
    if scopes:
        said.append(Phrase(", ".join(json_text(s) for s in scopes), lead="scopes "))
    expires = detail.pop("expires_at", None)
    said.append(Phrase(json_text(expires), lead="expires ") if expires else Phrase("never expires"))
    return said


def _token_owner(detail: dict) -> list[Phrase]:
    said = []
    user, name = detail.pop("user", None), detail.pop("name", None)
    if user:
        said.append(Phrase(json_text(user), lead="of "))
    if name:
        said.append(Phrase(json.dumps(json_text(name), ensure_ascii=False), lead="named "))
    return said


def _member_role(lead: str):
    def words(entry: AuditEntry, detail: dict) -> list[Phrase]:
        role = detail.pop("role", None)
        return [Phrase(json_text(role), lead=lead)] if role else []

    return words


def _member_changed(entry: AuditEntry, detail: dict) -> list[Phrase]:
    before, after = detail.pop("from", None), detail.pop("to", None)
    return [Phrase(f"from {json_text(before)} to {json_text(after)}")]


def _access_denied(entry: AuditEntry, detail: dict) -> list[Phrase]:
    capability = detail.pop("capability", None)
    said = [Phrase(access.CAPABILITY_WORDS.get(capability, json_text(capability)), lead="may not ")] if capability else []
    token = detail.pop("token", None)
    if token:
        said.append(Phrase(json_text(token), lead="with token "))
    return said


def _auto_recovery_held(entry: AuditEntry, detail: dict) -> list[Phrase]:
    agent, policy, limit = detail.pop("agent_name", None), detail.pop("policy", None), detail.pop("limit", None)
    said = [Phrase(json_text(agent) or "(no agent name)", lead="agent ")]
    if limit is not None:
        said.append(Phrase(f"over its limit of {json_text(limit)} automatic recoveries an hour" + (f" (policy {json_text(policy)})" if policy else "")))
    return said


def _session_deleted(entry: AuditEntry, detail: dict) -> list[Phrase]:
    """"12 events and 30 other rows; agent bot; by retention: 30 days" (the session is gone: nothing to link)."""
    detail.pop("session", None)
    events, rows = detail.pop("events", None), detail.pop("rows", None)
    said = []
    if isinstance(events, int):
        others = sum(n for label, n in rows.items() if isinstance(n, int)) - events - 1 if isinstance(rows, dict) else None
        said.append(Phrase(f"{events} event{'s' if events != 1 else ''}" + (f" and {others} other rows" if others else "")))
    if agent := detail.pop("agent", ""):
        said.append(Phrase(json_text(agent), lead="agent "))
    if policy := detail.pop("policy", None):
        said.append(Phrase(json_text(policy), lead="by "))
    return said


def _retention_changed(entry: AuditEntry, detail: dict) -> list[Phrase]:
    def days(value) -> str:
        return f"{value} days" if isinstance(value, int) else "forever"

    return [Phrase(f"{days(detail.pop('before', None))} → {days(detail.pop('after', None))}", lead="kept ")]


WORDS = {
    AuditEntry.RECOVERY: _recovery,
    AuditEntry.DANGLING_PATCH: _recovery,  # the same detail, less what only a recovery has
    AuditEntry.FORK: _fork,
    AuditEntry.TOKEN_CREATED: _token_created,
    AuditEntry.TOKEN_REVOKED: lambda entry, detail: _token_owner(detail),
    AuditEntry.MEMBER_ADDED: _member_role("as "),
    AuditEntry.MEMBER_CHANGED: _member_changed,
    AuditEntry.MEMBER_REMOVED: _member_role("was "),
    AuditEntry.ACCESS_DENIED: _access_denied,
    AuditEntry.AUTO_RECOVERY_HELD: _auto_recovery_held,
    AuditEntry.SESSION_DELETED: _session_deleted,
    AuditEntry.RETENTION_CHANGED: _retention_changed,
}
