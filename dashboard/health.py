"""The probes a load balancer or an orchestrator polls: `/healthz` (liveness) and `/readyz` (readiness).

Answered by an ASGI app in front of everything else (dashboard/asgi.py), so
they pass no middleware: no login, no Host check (a load balancer polls by
address, not by the site's name), no HTTPS redirect, no CSRF or django-axes,
no outage page, no access log line (they come every second). JSON bodies:

- `/healthz`: 200 `{"status": "ok"}` as long as the process answers; touches nothing.
- `/readyz`: the database answers and every migration on disk is applied: 200,
  `"ok"`; the channel layer (Redis) unreachable as well: still 200, `"degraded"`,
  since the streams keep serving from the database's poll meanwhile; no
  database, or migrations missing: 503, `"unavailable"`. Cheap enough to poll
  every second: the migrations on disk are read once per process, a probe then
  costs one small query (and a Redis PING when scaled out). The database is
  given at most SOCKET_DATABASE_WAIT_SECONDS to hand out a connection (as new
  sockets are), so a probe of a dead database answers within about a second.
"""

from __future__ import annotations

import asyncio
import functools

import orjson
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections
from django.db.migrations.loader import MigrationLoader

from dashboard.live.layer import UNREACHABLE as LAYER_UNREACHABLE
from dashboard.middleware import pool_unreachable
from dashboard.outage import DATABASE_UNAVAILABLE

LIVENESS, READINESS = "/healthz", "/readyz"
OK, DEGRADED, UNAVAILABLE = "ok", "degraded", "unavailable"
# Seconds a probe waits for Redis's PING before calling the layer unreachable.
LAYER_PING_SECONDS = 1.0

MigrationKey = tuple[str, str]  # (app label, migration name), as django_migrations records them


@functools.cache
def expected_migrations() -> tuple[tuple[MigrationKey, frozenset[MigrationKey]], ...]:
    """Every migration on disk, with what a squashed one replaces (applied either way); read once per process."""
    graph = MigrationLoader(None, ignore_no_migrations=True).graph
    return tuple((key, frozenset(graph.nodes[key].replaces)) for key in graph.nodes)


def unapplied(applied: set[MigrationKey]) -> list[MigrationKey]:
    return [key for key, replaces in expected_migrations() if key not in applied and not (replaces and replaces <= applied)]


def database_checks() -> tuple[dict[str, str], int]:
    """The database's and the migrations' checks, and how many migrations are unapplied (in a thread: it blocks)."""
    if pool_unreachable() is not None:  # PostgreSQL's pool gave no connection within a second
        return {"database": "unreachable", "migrations": "unknown"}, 0
    connection = connections[DEFAULT_DB_ALIAS]
    try:
        with connection.cursor() as cursor:
            try:
                cursor.execute("SELECT app, name FROM django_migrations")
                applied = set(map(tuple, cursor.fetchall()))
            except DATABASE_UNAVAILABLE:
                cursor.execute("SELECT 1")  # SQLite says "no such table" with the same class as "unable to open"
                applied = set()
            except DatabaseError:  # PostgreSQL: no table yet
                applied = set()
    except DATABASE_UNAVAILABLE:
        return {"database": "unreachable", "migrations": "unknown"}, 0
    finally:
        connection.close()  # back to the pool; this thread may not be asked again
    missing = len(unapplied(applied))
    return {"database": OK, "migrations": "unapplied" if missing else OK}, missing


async def channel_layer_check() -> str:
    """ok (each Redis answered a PING), unreachable, or in-process (the in-memory layer of one process: nothing to reach)."""
    layer = get_channel_layer()
    if not hasattr(layer, "connection"):
        return "in-process"
    try:
        for shard in range(layer.ring_size):
            await asyncio.wait_for(layer.connection(shard).ping(), LAYER_PING_SECONDS)
    except (*LAYER_UNREACHABLE, asyncio.TimeoutError):
        return "unreachable"
    return OK


async def readiness() -> tuple[int, dict]:
    checks, missing = await sync_to_async(database_checks, thread_sensitive=False)()
    checks["channel_layer"] = await channel_layer_check()
    if checks["database"] != OK or checks["migrations"] != OK:
        return 503, {"status": UNAVAILABLE, "checks": checks, **({"unapplied_migrations": missing} if missing else {})}
    return 200, {"status": OK if checks["channel_layer"] != "unreachable" else DEGRADED, "checks": checks}


class HealthProbes:
    """ASGI app: the two probes, everything else to `inner`."""

    def __init__(self, inner):
        self.inner = inner

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["path"] not in (LIVENESS, READINESS):
            return await self.inner(scope, receive, send)
        headers = [(b"content-type", b"application/json"), (b"cache-control", b"no-store")]
        if scope["method"] not in ("GET", "HEAD"):
            status, body = 405, {"detail": f"{scope['path']} answers GET and HEAD only", "error": "method_not_allowed"}
            headers.append((b"allow", b"GET, HEAD"))
        elif scope["path"] == LIVENESS:
            status, body = 200, {"status": OK}
        else:
            status, body = await readiness()
        content = orjson.dumps(body)
        headers.append((b"content-length", str(len(content)).encode()))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": b"" if scope["method"] == "HEAD" else content})
