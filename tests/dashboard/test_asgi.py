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
