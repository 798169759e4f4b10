"""A request naming a host outside ALLOWED_HOSTS: a 400, logged as one line without a traceback."""

from __future__ import annotations

import http.client
import logging

import pytest
from django.db import connection
from django.test import Client

from tests.servers import DaphneServer

EVIL = "evil.example"


@pytest.mark.django_db
def test_a_disallowed_host_is_one_log_line_without_a_traceback(caplog):
    caplog.set_level(logging.INFO)
    assert Client().get("/", HTTP_HOST=EVIL).status_code == 400
    records = [r for r in caplog.records if EVIL in r.getMessage()]
    assert [r.name for r in records] == ["django.security.DisallowedHost"]
    assert records[0].exc_info is None and records[0].exc_text is None
    assert "Traceback" not in caplog.text and len([line for line in caplog.text.splitlines() if EVIL in line]) == 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(90)
def test_daphne_logs_a_disallowed_host_as_one_line(tmp_path):
    server = DaphneServer(connection.settings_dict, tmp_path / "daphne.log").start()
    try:
        for path in ("/", "/api/v1/sessions", "/login/"):
            client = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
            client.request("GET", path, headers={"Host": EVIL})
            assert client.getresponse().status == 400
            client.close()
    finally:
        server.stop()
    log = server.log_path.read_text()
    assert "Traceback" not in log, log
    assert len([line for line in log.splitlines() if EVIL in line]) == 3, log
