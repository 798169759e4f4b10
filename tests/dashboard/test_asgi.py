import pytest
from asgiref.testing import ApplicationCommunicator

from dashboard.asgi import application
from tests.asgi import response_of


async def get(path: str) -> tuple[int, bytes]:
    """One GET through the whole ASGI application, as Daphne hands it a raw path."""
    scope = {"type": "http", "http_version": "1.1", "method": "GET", "path": path, "raw_path": path.encode(), "query_string": b"", "headers": []}
    communicator = ApplicationCommunicator(application, scope)
    await communicator.send_input({"type": "http.request", "body": b""})
    status, _, body = await response_of(communicator, 5)
    return status, body


@pytest.mark.asyncio
@pytest.mark.parametrize("path", ["/static/../dashboard/settings.py", "/static/../../etc/passwd", "/static/turnlog/../../manage.py"])
async def test_a_static_path_leaving_the_static_root_is_404(path):
    status, body = await get(path)
    assert status == 404
    assert b"SECRET_KEY" not in body and b"import " not in body


@pytest.mark.asyncio
async def test_static_files_are_still_served():
    status, body = await get("/static/turnlog/turnlog.css")
    assert status == 200 and body


CONTENT_TYPES = [
    b"application/json",
    b"application/json; charset=utf-8",
    b"Application/JSON",
    b"multipart/form-data; boundary=xyz",
    b"application/x-www-form-urlencoded",
    b"text/plain; charset=\"latin-1\"",
    b"",
    b"nonsense",
    b"\xff\xfe/\x00",
]


def test_twisteds_content_type_parsing_is_cached_with_the_same_answers(monkeypatch):
    from twisted.web import http

    from dashboard import asgi

    original = getattr(http._parseContentType, "__wrapped__", http._parseContentType)
    monkeypatch.setattr(http, "_parseContentType", original)
    monkeypatch.setitem(asgi.sys.modules, "twisted.web.http", http)
    asgi.cache_twisted_content_type_parsing()
    cached = http._parseContentType
    assert cached is not original and cached.__wrapped__ is original
    for line in CONTENT_TYPES * 2:
        assert cached(line) == original(line), line
    assert cached.cache_info().hits == len(CONTENT_TYPES)
    asgi.cache_twisted_content_type_parsing()  # once only: a second call does not wrap the cache
    assert http._parseContentType is cached
