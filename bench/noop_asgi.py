"""An ASGI app that does nothing but answer: the ceiling of single appends under the same server and client.

bench/ingest.py runs it under the same `daphne` command as Turnlog and sends it
the same requests from the same clients. It reads each request's body and
answers a POST with 201 and the seqs an append of one event would get (a
counter per path), so the clients check their answers as they do against
Turnlog, and anything else with 200; it touches no database and no framework.
"""

from __future__ import annotations

import json
from collections import Counter

_next_seq: Counter[str] = Counter()


async def application(scope, receive, send):
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    while (await receive()).get("more_body"):
        pass
    if scope["method"] != "POST":
        status, body = 200, b"{}"
    else:
        path = scope["path"]
        seq = _next_seq[path]
        _next_seq[path] += 1
        status, body = 201, json.dumps({"first_seq": seq, "next_seq": seq + 1}).encode()
    await send({"type": "http.response.start", "status": status, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": body})
