"""The scrape on an address of its own (TURNLOG_METRICS_BIND), for a scraper inside the network.

Served by the recovery worker (one per deployment, where several Daphnes could not share one port),
without a token: bind it to an address only the scraper's network reaches. It answers what GET /metrics
answers (exposition.scrape: every process of the multi-process directory), at /metrics only.
"""

from __future__ import annotations

import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from django.db import Error as DatabaseError
from django.db import connections
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from .exposition import scrape

logger = logging.getLogger(__name__)


def parse_address(text: str) -> tuple[str, int]:
    """HOST:PORT ([::1]:9464 for IPv6) as (host, port); ValueError saying what is wrong."""
    host, _, port = text.strip().rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"TURNLOG_METRICS_BIND must be HOST:PORT (127.0.0.1:9464), not {text!r}")
    return host.removeprefix("[").removesuffix("]"), int(port)


class _Scrapes(BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path.partition("?")[0] != "/metrics":
            return self._answer(404, b"only /metrics is served here\n", "text/plain; charset=utf-8")
        try:
            body = scrape()
        except DatabaseError as error:
            logger.warning("metrics scrape: database unavailable: %s", error)
            return self._answer(503, b"database unavailable: the sessions by status cannot be read\n", "text/plain; charset=utf-8")
        finally:
            connections.close_all()  # this request thread's: nothing keeps a connection between scrapes
        self._answer(200, body, CONTENT_TYPE_LATEST)

    def _answer(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format, *args):  # scrapes every few seconds are not news
        pass


def serve(address: str) -> ThreadingHTTPServer:
    """Serve scrapes at `address` on a daemon thread (it ends with the process); OSError when it cannot bind."""
    server = ThreadingHTTPServer(parse_address(address), _Scrapes)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="metrics-listener", daemon=True).start()
    return server
