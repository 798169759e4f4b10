"""A project's webhook endpoints, changed by its admins (the project's Webhooks tab, the admin): each change audited."""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from sessions_app.models import AuditEntry, Project, WebhookEndpoint, all_kinds, new_secret
from sessions_app.services.audit_log import audit

from .addresses import refusal_for_url

FIELDS = ("url", "agent_patterns", "kinds", "enabled", "slack")


class EndpointRefused(ValueError):
    """An endpoint that cannot be saved: the field and why."""

    def __init__(self, field: str, why: str):
        super().__init__(f"{field}: {why}")
        self.field, self.why = field, why


def check(*, url: str, kinds: list[str], agent_patterns: str) -> None:
    if why := refusal_for_url(url):
        raise EndpointRefused("url", why)
    if not kinds or set(kinds) - set(all_kinds()):
        raise EndpointRefused("kinds", f"choose one or more of {', '.join(all_kinds())}")
    if not agent_patterns.split():
        raise EndpointRefused("agent_patterns", "name at least one agent or pattern (* for every agent)")


def create_endpoint(
    *, project: Project, actor, url: str, agent_patterns: str = "*", kinds: list[str] | None = None, enabled: bool = True, slack: bool = False
) -> WebhookEndpoint:
    """A new endpoint with a new secret; told only of transitions from now on."""
    kinds = all_kinds() if kinds is None else kinds
    check(url=url, kinds=kinds, agent_patterns=agent_patterns)
    with transaction.atomic():
        endpoint = WebhookEndpoint.objects.create(
            project=project, url=url, agent_patterns=" ".join(agent_patterns.split()), kinds=kinds, enabled=enabled, slack=slack
        )
        _audit(endpoint, actor, "created")
    return endpoint


def update_endpoint(*, endpoint: WebhookEndpoint, actor, rotate_secret: bool = False, **changes) -> WebhookEndpoint:
    """Change some of FIELDS; enabling a disabled endpoint makes it new again: it is not told of what happened before."""
    unknown = set(changes) - set(FIELDS)
    if unknown:
        raise TypeError(f"not an endpoint field: {', '.join(sorted(unknown))}")
    changed = {name: value for name, value in changes.items() if getattr(endpoint, name) != value}
    if "agent_patterns" in changed:
        changed["agent_patterns"] = " ".join(changed["agent_patterns"].split())
    check(url=changed.get("url", endpoint.url), kinds=changed.get("kinds", endpoint.kinds), agent_patterns=changed.get("agent_patterns", endpoint.agent_patterns))
    with transaction.atomic():
        endpoint = WebhookEndpoint.objects.select_for_update().get(pk=endpoint.pk)
        for name, value in changed.items():
            setattr(endpoint, name, value)
        if changed.get("enabled") is True:
            endpoint.created_at, endpoint.disabled_reason = timezone.now(), ""
        if rotate_secret:
            endpoint.secret = new_secret()
        if not changed and not rotate_secret:
            return endpoint
        endpoint.save()
        _audit(endpoint, actor, "changed", changed=sorted(changed) + (["secret"] if rotate_secret else []))
    return endpoint


def delete_endpoint(*, endpoint: WebhookEndpoint, actor) -> None:
    """The endpoint goes with its deliveries and their attempts (the audit log keeps that it existed)."""
    with transaction.atomic():
        _audit(endpoint, actor, "deleted")
        endpoint.delete()


def _audit(endpoint: WebhookEndpoint, actor, what: str, **more) -> None:
    detail = {"endpoint": endpoint.pk, what: True, "enabled": endpoint.enabled, "kinds": endpoint.kinds, "agents": endpoint.agent_patterns, **more}
    audit(project=endpoint.project_id, actor=actor, action=AuditEntry.WEBHOOK_CHANGED, target=endpoint.url, detail=detail)
