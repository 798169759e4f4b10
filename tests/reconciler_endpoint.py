"""A real reconciler check endpoint for tests: a threaded http.server on 127.0.0.1 that verifies each request's
Standard Webhooks signature with `standardwebhooks` and answers as the test tells it (status, body, delay), and
the tool policy that names it."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from standardwebhooks import Webhook

from sessions_app.models import ToolPolicy, new_secret


@dataclass
class Answer:
    status: int = 200
    body: bytes | dict | list = b""
    delay: float = 0.0
    headers: dict = field(default_factory=dict)


@dataclass
class Endpoint:
    url: str = ""
    secret: str = field(default_factory=new_secret)
    answers: dict[str, list[Answer]] = field(default_factory=dict)  # by path; the last one repeats
    received: list[dict] = field(default_factory=list)  # each request's verified payload
    bad_signatures: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def answer(self, path: str = "/check", *answers: Answer) -> str:
        self.answers[path] = list(answers)
        return self.url + path

    def next_answer(self, path: str) -> Answer:
        with self.lock:
            queue = self.answers.get(path) or [Answer(body={"outcome": "unknown", "evidence": "no such path"})]
            return queue.pop(0) if len(queue) > 1 else queue[0]


@pytest.fixture
def endpoint():
    state = Endpoint()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("content-length", 0)))
            try:
                payload = Webhook(state.secret).verify(body, dict(self.headers.items()))
            except Exception:  # a wrong signature: the test counts it
                with state.lock:
                    state.bad_signatures += 1
                payload = None
            if payload is not None:
                with state.lock:
                    state.received.append({**payload, "_path": self.path})
            answer = state.next_answer(self.path)
            time.sleep(answer.delay)
            data = answer.body if isinstance(answer.body, bytes) else json.dumps(answer.body).encode()
            self.send_response(answer.status)
            for name, value in answer.headers.items():
                self.send_header(name, value)
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            try:
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the asker stopped reading (a long answer)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield state
    server.shutdown()
    server.server_close()


def check_policy(url: str, secret: str, pattern: str = "tool_c3", project=None) -> ToolPolicy:
    return ToolPolicy.objects.create(project=project, pattern=pattern, side_effect=ToolPolicy.EXTERNAL_EFFECT, check_url=url, check_secret=secret)
