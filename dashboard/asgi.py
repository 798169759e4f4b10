import functools
import gc
import os
import sys

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")
# Django must be set up before anything imports models.
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from asgiref.sync import sync_to_async  # noqa: E402
from django.core.exceptions import SuspiciousOperation  # noqa: E402
from django.core.handlers.exception import response_for_exception  # noqa: E402
from django.http import Http404  # noqa: E402

from dashboard.access_log import HttpAccessLog, WebsocketAccessLog  # noqa: E402
from dashboard.cli import refuse_a_small_daphne_limit  # noqa: E402
from dashboard.health import HealthProbes  # noqa: E402
from dashboard.lanes import AppendLane, EventsLane  # noqa: E402
from dashboard.middleware import WebsocketDatabaseGuard  # noqa: E402
from dashboard.routing import websocket_urlpatterns  # noqa: E402
from sessions_app.lib import notify_systemd  # noqa: E402


class StaticFiles(ASGIStaticFilesHandler):
    """Django's static handler, except that a path leaving the static root
    (/static/../dashboard/settings.py) is a plain 404, not a 500."""

    async def get_response_async(self, request):
        try:
            return await sync_to_async(self.serve, thread_sensitive=False)(request)
        except (Http404, SuspiciousOperation):
            return await sync_to_async(response_for_exception, thread_sensitive=False)(request, Http404())

def cache_twisted_content_type_parsing() -> None:
    """Under Daphne, Twisted parses every POST's Content-Type through the email package (a new
    EmailMessage each time), for its form arguments: 13% of the server's CPU under single appends
    (docs/performance.md). The answer depends on the header's bytes alone, and clients send the same few."""
    http = sys.modules.get("twisted.web.http")  # imported by Daphne before it loads this module
    parse = getattr(http, "_parseContentType", None)
    if parse is not None and not hasattr(parse, "cache_info"):
        http._parseContentType = functools.lru_cache(maxsize=64)(parse)


cache_twisted_content_type_parsing()
# Daphne's command reads its websocket limits from its options alone: started without ours, it is refused here.
refuse_a_small_daphne_limit(sys.argv)


def tell_the_supervisor_from_the_event_loop() -> None:
    """Under Daphne with $NOTIFY_SOCKET (systemd's Type=notify, the scale-out launcher): READY=1 once the reactor
    runs (Daphne listens before it starts it), then WATCHDOG=1 every few seconds from the reactor itself, so a loop
    that is frozen or blocked goes silent and the supervisor restarts the process (WatchdogSec=)."""
    if not notify_systemd.enabled() or "twisted.internet.reactor" not in sys.modules:
        return  # not supervised so, or not under Daphne (importing the reactor here would install the wrong one)
    from twisted.internet import reactor, task

    def running():
        notify_systemd.notify(notify_systemd.READY)
        task.LoopingCall(notify_systemd.notify, notify_systemd.WATCHDOG).start(notify_systemd.watchdog_seconds(), now=True)

    reactor.callWhenRunning(running)
    reactor.addSystemEventTrigger("before", "shutdown", notify_systemd.notify, notify_systemd.STOPPING)


tell_the_supervisor_from_the_event_loop()

GC_YOUNG_THRESHOLD = 10_000


def freeze_startup_objects() -> None:
    """Python's full collections walk every tracked object; a server holds some hundred thousand from startup alone
    (Django, its apps, the compiled templates), and a full collection walking them took 50-400 ms every few
    seconds under live page load: the tail of frame latency (docs/performance.md). The site's templates are
    compiled first (Django's loader keeps them), then everything is frozen: never walked again."""
    from django.conf import settings
    from django.template.loader import get_template

    templates = settings.SITE_FILES_DIR / "templates"
    for path in sorted(templates.rglob("*.html")):
        get_template(path.relative_to(templates).as_posix())
    gc.collect()
    gc.freeze()
    # A frame allocates tens of thousands of short-lived objects: with the default 700, the young generations were
    # collected hundreds of times a second and the full one every few seconds.
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])


application = ProtocolTypeRouter(
    {
        # Daphne serves the few static files itself (no extra service for
        # the embedded setup); a deployment may put a cache in front.
        # Appends and event reads with a bearer token take lanes past Django's handler (lanes says why).
        # The health probes come first: no middleware applies to them, nor the access log (dashboard/health.py).
        "http": HealthProbes(HttpAccessLog(AppendLane(EventsLane(StaticFiles(django_asgi_app))))),
        "websocket": WebsocketAccessLog(WebsocketDatabaseGuard(AuthMiddlewareStack(URLRouter(websocket_urlpatterns)))),
    }
)
freeze_startup_objects()
