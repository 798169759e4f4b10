"""GET /metrics: the scrape, for a site-level token with the `metrics` scope only.

A site-level token belongs to no project and carries only `metrics`; only a superuser may hold one
(`manage.py tokens create --user ADMIN --site`, services.issue_token). Prometheus sends it as
`authorization: {credentials: ...}` (docs/guide/metrics.md). No token, or one that does not authenticate:
401; a project's token: 403. The answer lists every project's session counts, so it is never public.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from sessions_app import selectors
from sessions_app.lib.bearer import bearer_secret
from sessions_app.models import ApiToken, Scope
from sessions_app.selectors import access

from .multiprocess import MergingCollector, directory

HOW_TO_SCRAPE = (
    "GET /metrics needs a site-level token with the 'metrics' scope as 'Authorization: Bearer <token>'"
    " (a superuser issues one: manage.py tokens create --user ADMIN --site)"
)


class SessionsByStatus:
    """turnlog_sessions{project, status}: read at each scrape from the sessions' summary columns (one grouped query)."""

    def collect(self):
        family = GaugeMetricFamily(
            "turnlog_sessions", "Sessions by status (running, stalled, active, recovered, clean), per project", labels=["project", "status"]
        )
        counts = {(slug, status): n for slug, status, n in selectors.sessions_by_status()}
        # Every status of a project with sessions, 0 included: an alert on stalled > 0 needs the series.
        for slug in sorted({slug for slug, _ in counts}):
            for status in selectors.STATUSES:
                family.add_metric([slug, status], counts.get((slug, status), 0))
        yield family


class _ThisProcess:
    """The default registry's metrics (single-process mode: everything this process counted, and its process_* metrics)."""

    def collect(self):
        return REGISTRY.collect()


def scrape() -> bytes:
    """The exposition text: every process's counts (multi-process mode) or this process's, and the sessions by status."""
    registry = CollectorRegistry(auto_describe=False)
    path = directory()
    registry.register(MergingCollector(path) if path else _ThisProcess())
    registry.register(SessionsByStatus())
    return generate_latest(registry)


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    secret = bearer_secret(request.headers.get("Authorization")) or ""
    token = ApiToken.usable_for(secret) if secret else None
    if token is None:
        why = f"{access.token_refusal(secret)}: " if secret else ""
        response = HttpResponse(f"{why}{HOW_TO_SCRAPE}\n", status=401, content_type="text/plain; charset=utf-8")
        response["WWW-Authenticate"] = 'Bearer realm="turnlog metrics"'
        return response
    if token.project_id is not None or Scope.METRICS not in token.scopes:
        return HttpResponse(
            f"token {token.prefix}… may not scrape metrics: it is a project's token. {HOW_TO_SCRAPE}\n",
            status=403, content_type="text/plain; charset=utf-8",
        )  # fmt: skip
    token.mark_used()
    return HttpResponse(scrape(), content_type=CONTENT_TYPE_LATEST)
