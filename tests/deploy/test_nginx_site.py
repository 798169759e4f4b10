"""deploy/nginx-site.conf: the site file in a minimal main configuration, checked and run by a real nginx.

The certificate comes from the deployment guide's own `openssl` command and the
check from its `nginx -t` (both run here as the guide writes them, into this
test's directory). A real nginx with the site file then stands in front of real
Daphne processes on the test database: plain HTTP redirects to HTTPS, requests
through TLS reach Turnlog, a stopped Daphne gives the API a JSON 502 with
Retry-After (and the pages nginx's own page), and a Daphne frozen by SIGSTOP
holds an API request only for the site's read timeout (rendered shorter here, so
that the test is quick): GETs go on to the other Daphne, an append gets a JSON
504 and, sent again with the same Idempotency-Key, is stored exactly once.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import socket
import ssl
import subprocess
import time
import uuid
from pathlib import Path

import httpx
import pytest
from django.conf import settings
from django.db import connection

from tests.access import token_for
from tests.conftest import running_in_ci
from tests.guide_commands import guide_commands
from tests.servers import PROJECT_DIR, DaphneServer, free_port

SITE = PROJECT_DIR / "deploy" / "nginx-site.conf"
GUIDE_TLS_DIR = "/etc/turnlog/tls/"  # where the guide's openssl command writes; this test's directory instead
TIMEOUT = 3  # s: the site's read timeout outside /ws/, shortened here (the file says 30 s)
MARGIN = 5  # s: nginx's own work and a busy machine


def nginx_binary() -> str:
    binary = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
    if binary is None:
        if running_in_ci():
            pytest.fail("nginx is not installed; CI must install it (apt-get install nginx)")
        pytest.skip("nginx is not installed (apt-get install -y -qq nginx)")
    return binary


def render_site(*, upstreams: list[int], http_port: int, https_port: int, tls: Path, static_root: Path, timeout: int | None = None) -> str:
    """The site file with its {{...}} fields filled in, as the guide tells an operator to (and its read timeout
    outside /ws/ replaced when `timeout` is given)."""
    fields = {
        "upstream_servers": "\n".join(f"    server 127.0.0.1:{port} max_fails=0;" for port in upstreams),
        "server_name": "_", "http_listen": f"127.0.0.1:{http_port}", "https_listen": f"127.0.0.1:{https_port}",
        "ssl_certificate": str(tls / "fullchain.pem"), "ssl_certificate_key": str(tls / "privkey.pem"),
        "static_root": str(static_root),
    }  # fmt: skip
    # The fields of directives; the comments naming them stay as they are.
    text = "".join(
        line if line.lstrip().startswith("#") else re.sub(r"\{\{(\w+)\}\}", lambda field: fields[field.group(1)], line)
        for line in SITE.read_text().splitlines(keepends=True)
    )
    if timeout is not None:
        for directive in ("proxy_read_timeout", "proxy_send_timeout"):
            assert text.count(f"{directive} 30s;") == 1, directive
            text = text.replace(f"{directive} 30s;", f"{directive} {timeout}s;")
    return text


def main_config(run_dir: Path, site: Path) -> Path:
    """The least of a main configuration that includes a site file, as Debian's includes sites-enabled/*."""
    for part in ("logs", "tmp"):
        (run_dir / part).mkdir(exist_ok=True)
    user_line = "user root;" if os.geteuid() == 0 else ""  # the workers must read the test's files
    path = run_dir / "nginx.conf"
    path.write_text(
        f"""{user_line}
worker_processes 1;
pid {run_dir}/nginx.pid;
error_log {run_dir}/logs/error.log warn;
events {{ worker_connections 1024; }}
http {{
    include /etc/nginx/mime.types;
    default_type application/octet-stream;
    access_log {run_dir}/logs/access.log;
    client_body_temp_path {run_dir}/tmp/body;
    proxy_temp_path {run_dir}/tmp/proxy;
    fastcgi_temp_path {run_dir}/tmp/fastcgi;
    uwsgi_temp_path {run_dir}/tmp/uwsgi;
    scgi_temp_path {run_dir}/tmp/scgi;
    include {site};
}}
"""
    )
    return path


def run_guide_openssl(tls: Path) -> None:
    """The guide's certificate command, writing into `tls` instead of /etc/turnlog/tls/."""
    (command,) = set(guide_commands("openssl"))
    arguments = [argument.replace(GUIDE_TLS_DIR, f"{tls}/") for argument in shlex.split(command)]
    assert f"{tls}/fullchain.pem" in arguments and f"{tls}/privkey.pem" in arguments, command
    tls.mkdir(exist_ok=True)
    subprocess.run(arguments, check=True, capture_output=True, timeout=60)


def nginx_check(binary: str, run_dir: Path, config: Path) -> subprocess.CompletedProcess:
    """The guide's `nginx -t`, pointed at this test's main configuration instead of /etc/nginx/nginx.conf."""
    (command,) = set(guide_commands("nginx"))  # in a block and named inline
    assert command == "nginx -t", command
    arguments = [binary, *shlex.split(command)[1:], "-p", str(run_dir), "-c", str(config), "-e", str(run_dir / "logs" / "error.log")]
    return subprocess.run(arguments, capture_output=True, text=True, timeout=60)


class Nginx:
    """nginx in the foreground on the rendered site file."""

    def __init__(self, run_dir: Path, *, upstreams: list[int], timeout: int | None = TIMEOUT):
        self.binary = nginx_binary()
        self.run_dir = run_dir
        self.tls = run_dir / "tls"
        run_guide_openssl(self.tls)
        self.http_port, self.https_port = free_port(), free_port()
        site = run_dir / "turnlog.conf"
        site.write_text(render_site(
            upstreams=upstreams, http_port=self.http_port, https_port=self.https_port, tls=self.tls,
            static_root=run_dir / "static", timeout=timeout,
        ))  # fmt: skip
        self.config = main_config(run_dir, site)
        self.process: subprocess.Popen | None = None

    def start(self) -> Nginx:
        check = nginx_check(self.binary, self.run_dir, self.config)
        assert check.returncode == 0, check.stderr
        log = (self.run_dir / "logs" / "nginx.log").open("a")
        self.process = subprocess.Popen(
            [self.binary, "-p", str(self.run_dir), "-c", str(self.config), "-e", str(self.run_dir / "logs" / "error.log"), "-g", "daemon off;"],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        log.close()
        deadline = time.monotonic() + 30
        while True:
            assert self.process.poll() is None, (self.run_dir / "logs" / "error.log").read_text()
            assert time.monotonic() < deadline, "nginx did not listen within 30 s"
            try:
                socket.create_connection(("127.0.0.1", self.https_port), timeout=0.2).close()
                return self
            except OSError:
                time.sleep(0.1)

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=10)

    def tls_context(self) -> ssl.SSLContext:
        """Trusting the test's self-signed certificate (issued for the guide's host name)."""
        context = ssl.create_default_context(cafile=str(self.tls / "fullchain.pem"))
        context.check_hostname = False  # the certificate names turnlog.example.com; the test connects to 127.0.0.1
        return context

    def alpn(self) -> str | None:
        """The protocol nginx picks when a client offers HTTP/2 and HTTP/1.1."""
        context = self.tls_context()
        context.set_alpn_protocols(["h2", "http/1.1"])
        with socket.create_connection(("127.0.0.1", self.https_port), timeout=10) as raw:
            with context.wrap_socket(raw) as tls:
                return tls.selected_alpn_protocol()

    def client(self, token: str | None = None) -> httpx.Client:
        """HTTPS to nginx."""
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=f"https://127.0.0.1:{self.https_port}", verify=self.tls_context(), headers=headers, timeout=120)


@pytest.fixture
def daphnes(request, transactional_db, tmp_path):
    count = getattr(request, "param", 1)
    servers = [DaphneServer(connection.settings_dict, tmp_path / f"daphne-{i}.log", TURNLOG_BEHIND_PROXY="1") for i in range(count)]
    for server in servers:
        server.start()
    yield servers
    for server in servers:
        if server.process is not None:
            server.process.send_signal(signal.SIGCONT)  # a frozen one cannot act on SIGTERM
        server.stop()


@pytest.fixture
def nginx(daphnes, tmp_path):
    run_dir = tmp_path / "nginx"
    run_dir.mkdir()
    server = Nginx(run_dir, upstreams=[daphne.port for daphne in daphnes]).start()
    yield server
    server.stop()


def assert_upstream_error(response: httpx.Response, status: int) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    assert response.headers["retry-after"] == "1"
    body = response.json()
    assert body["error"] == "upstream_unavailable" and "Idempotency-Key" in body["detail"]


def test_the_guides_openssl_and_nginx_t_commands_accept_the_site_file_in_a_minimal_main_config(tmp_path):
    binary = nginx_binary()
    tls = tmp_path / "tls"
    run_guide_openssl(tls)
    assert "BEGIN CERTIFICATE" in (tls / "fullchain.pem").read_text()
    assert (tls / "privkey.pem").stat().st_mode & 0o077 == 0  # the key readable by its owner alone
    site = tmp_path / "turnlog.conf"
    site.write_text(render_site(upstreams=[8001, 8002], http_port=free_port(), https_port=free_port(), tls=tls, static_root=tmp_path / "static"))
    check = nginx_check(binary, tmp_path, main_config(tmp_path, site))
    assert check.returncode == 0, check.stderr
    assert "test is successful" in check.stderr


def test_the_site_file_documents_each_field_it_has():
    text = SITE.read_text()
    fields = set(re.findall(r"\{\{(\w+)\}\}", text))
    assert fields == {"upstream_servers", "server_name", "http_listen", "https_listen", "ssl_certificate", "ssl_certificate_key", "static_root"}
    header = text.split("\n\n")[0]
    for field in fields:
        assert f"#   {{{{{field}}}}}" in header, field


def test_outside_websockets_nginx_waits_the_database_pool_timeout_plus_ten_seconds_and_on_them_past_the_socket_renewal():
    text = SITE.read_text()
    # The defaults as the settings read them (the pool's exists on PostgreSQL only, so read from the source).
    source = (PROJECT_DIR / "dashboard" / "settings.py").read_text()
    pool_timeout = float(re.search(r'"TURNLOG_DB_POOL_TIMEOUT", "(\d+)"', source).group(1))
    renew = float(re.search(r'"TURNLOG_SOCKET_RENEW_SECONDS", "(\d+)"', source).group(1))
    assert settings.TURNLOG_SOCKET_RENEW_SECONDS == renew or "TURNLOG_SOCKET_RENEW_SECONDS" in os.environ
    server_level = re.search(r"proxy_read_timeout (\d+)s;\n    proxy_send_timeout (\d+)s;", text)
    assert server_level is not None and {int(server_level.group(1)), int(server_level.group(2))} == {int(pool_timeout) + 10}
    websockets = re.search(r"location /ws/ \{(.*?)\}", text, flags=re.DOTALL).group(1)
    assert "proxy_read_timeout 3900s;" in websockets and "proxy_send_timeout 3900s;" in websockets
    assert int(renew) + 300 == 3900
    # Only /ws/ has the long timeout; no other location sets one.
    assert text.count("proxy_read_timeout") == 2 and text.count("proxy_send_timeout") == 2
    # A POST that may have reached a Daphne is never sent to another by nginx.
    directives = "\n".join(line.split("#")[0] for line in text.splitlines())
    assert "proxy_next_upstream error timeout;" in directives and "non_idempotent" not in directives


def test_through_the_site_file_http_redirects_to_https_and_tls_reaches_turnlog(nginx, django_user_model):
    token = token_for(django_user_model.objects.create_user("agent"))
    plain = httpx.get(f"http://127.0.0.1:{nginx.http_port}/api/v1/sessions?limit=1", timeout=30)
    assert plain.status_code == 308
    assert plain.headers["location"] == "https://127.0.0.1/api/v1/sessions?limit=1"
    with nginx.client(token) as client:
        created = client.post("/api/v1/sessions", json={"id": "through-tls"})
        assert created.status_code == 201, created.text
        listed = client.get("/api/v1/sessions")
        assert listed.status_code == 200 and [item["id"] for item in listed.json()["items"]] == ["through-tls"]
        page = client.get("/login/")
        assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    assert nginx.alpn() == "h2"  # HTTP/2 offered to clients that can speak it


def test_with_the_daphne_stopped_the_api_and_otlp_get_json_502_with_retry_after_and_the_pages_do_not(nginx, daphnes, django_user_model):
    token = token_for(django_user_model.objects.create_user("agent"))
    daphnes[0].stop()
    with nginx.client(token) as client:
        assert_upstream_error(client.get("/api/v1/sessions"), 502)
        append = client.post("/api/v1/sessions/s1/events", json={"events": []}, headers={"Idempotency-Key": "k1"})
        assert_upstream_error(append, 502)
        assert_upstream_error(client.post("/otlp/v1/traces", content=b"{}", headers={"Content-Type": "application/json"}), 502)
        page = client.get("/")
        assert page.status_code == 502 and "text/html" in page.headers["content-type"]
        assert "upstream_unavailable" not in page.text


@pytest.mark.parametrize("daphnes", [2], indirect=True)
def test_a_frozen_daphne_holds_a_request_only_for_the_read_timeout_and_a_retried_append_is_stored_once(nginx, daphnes, django_user_model):
    token = token_for(django_user_model.objects.create_user("agent"))
    with nginx.client(token) as client:
        assert client.post("/api/v1/sessions", json={"id": "frozen"}).status_code == 201
        daphnes[0].process.send_signal(signal.SIGSTOP)  # it still accepts connections; it never answers

        # GETs: the one sent to the frozen Daphne times out and goes on to the other, within the timeout.
        for _ in range(4):
            started = time.monotonic()
            response = client.get("/api/v1/sessions/frozen")
            assert response.status_code == 200, response.text
            assert time.monotonic() - started < TIMEOUT + MARGIN

        # Appends: never sent on by nginx; the one the frozen Daphne holds gets a JSON 504 after the timeout,
        # and the same request again (the same Idempotency-Key) is stored once.
        answers = []
        for index in range(4):
            key = str(uuid.uuid4())
            body = {"events": [{"type": "user_message", "data": {"content": f"m{index}"}}]}
            while True:
                started = time.monotonic()
                response = client.post("/api/v1/sessions/frozen/events", json=body, headers={"Idempotency-Key": key})
                assert time.monotonic() - started < TIMEOUT + MARGIN
                answers.append(response.status_code)
                if response.status_code != 504:
                    break
                assert_upstream_error(response, 504)
            assert response.status_code == 201, response.text
        assert 504 in answers, answers  # round robin sent some to the frozen one
    # SIGCONT: the frozen Daphne now reads the appends nginx gave up on; their keys make them store nothing.
    daphnes[0].process.send_signal(signal.SIGCONT)
    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx.get(f"{daphnes[0].url}/healthz", timeout=5).status_code == 200:
                break
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, "the Daphne did not answer again after SIGCONT"
        time.sleep(0.2)
    time.sleep(2)  # the requests it held finish before this new one
    with nginx.client(token) as client:
        listed = client.get("/api/v1/sessions/frozen/events")
    assert listed.status_code == 200, listed.text
    assert [event["data"]["content"] for event in listed.json()["events"]] == ["m0", "m1", "m2", "m3"]
