"""Numbers in query strings: a Unicode digit ("²" passes `str.isdigit()`, `int()` refuses it) is a 4xx or the default, never a 500."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from channels.testing import WebsocketCommunicator
from django.conf import settings

from dashboard.asgi import application
from sessions_app import services
from sessions_app.lib.params import MAX_DIGITS, BadParameter, decimal_int
from sessions_app.models import Role
from tests.access import member
from tests.dashboard.conftest import WAIT, opened
from tests.dashboard.live.test_consumers import append, append_sync, create
from tests.dashboard.live.test_sessions import HOST, ORIGIN, browser_socket, closed_with

SUPERSCRIPT_TWO = "²"


def member_named(django_user_model, username: str):
    """A member of the default project, where `stored` puts its sessions."""
    user = django_user_model.objects.create_user(username)
    member(user)
    return user


def stored(session_id: str, count: int) -> None:
    services.create_session(session_id=session_id)
    append_sync(session_id, count)


@pytest.mark.parametrize("text", ["²", "١", "𝟠", "-1", "1.5", " 1", "1_0", "", "+1"])
def test_only_ascii_decimal_digits_are_a_number(text):
    assert decimal_int(text, name="n") is None


def test_ascii_decimal_digits_are_their_number():
    assert decimal_int("0", name="n") == 0 and decimal_int("0042", name="n") == 42 and decimal_int("9" * 30, name="n") == int("9" * 30)


@pytest.mark.django_db
@pytest.mark.parametrize(
    "path, params",
    [
        ("/sessions/{sid}/", {"view": "raw", "before": SUPERSCRIPT_TWO}),
        ("/sessions/{sid}/", {"highlight": f"{SUPERSCRIPT_TWO}-3"}),
        ("/sessions/{sid}/", {"highlight": f"1-{SUPERSCRIPT_TWO}"}),
        ("/sessions/{sid}/blocks", {"before": SUPERSCRIPT_TWO}),
        ("/sessions/{sid}/fork", {"boundary": SUPERSCRIPT_TWO}),
        ("/", {"cursor": SUPERSCRIPT_TWO}),
    ],
)
def test_a_page_given_a_unicode_digit_answers_without_a_server_error(client, django_user_model, path, params):
    stored("digits", 3)
    client.force_login(member_named(django_user_model, "viewer"))
    response = client.get(path.format(sid="digits"), params)
    assert response.status_code in (200, 400)


@pytest.mark.django_db
def test_a_page_given_a_huge_seq_answers_like_one_past_the_end(client, django_user_model):
    stored("digits", 3)
    client.force_login(member_named(django_user_model, "viewer"))
    huge = "9" * 40  # beyond any 64-bit column
    assert client.get("/sessions/digits/", {"view": "raw", "before": huge}).status_code == 200
    assert client.get("/sessions/digits/blocks", {"before": huge}).status_code == 200
    assert client.get("/sessions/digits/", {"highlight": f"1-{huge}"}).status_code == 200


@pytest.mark.django_db
def test_the_fork_form_refuses_a_unicode_digit_as_a_boundary(client, django_user_model):
    stored("digits", 3)
    client.force_login(member_named(django_user_model, "viewer"))
    response = client.post("/sessions/digits/fork", {"boundary": SUPERSCRIPT_TWO, "id": "child"})
    assert response.status_code == 422


@pytest.mark.django_db
@pytest.mark.parametrize("params", [{"since": SUPERSCRIPT_TWO}, {"limit": SUPERSCRIPT_TWO}])
def test_the_api_refuses_a_unicode_digit_in_a_query(api, params):
    stored("digits", 3)
    response = api.get("/api/v1/sessions/digits/events", params)
    assert response.status_code == 422 and response.json()["error"]



@pytest.mark.parametrize("first", ["%C2%B2", "%B2"])
@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
@pytest.mark.usefixtures("slow_poll", "fresh_layer")
async def test_a_raw_page_socket_given_a_unicode_digit_streams_from_the_start(sid, session_cookie, first):
    await create(sid, 1)
    page = await browser_socket(f"/ws/sessions/{sid}/live?view=raw&first={first}&after=0", session_cookie)
    await append(sid, 1)
    assert 'data-last-seq="1"' in await page.receive_from(timeout=WAIT)
    await page.disconnect()


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
@pytest.mark.usefixtures("slow_poll", "fresh_layer")
async def test_a_raw_unicode_digit_byte_in_a_page_socket_query_is_no_server_error(sid, session_cookie):
    """Query strings are decoded as latin-1, where byte 0xB2 is "²"."""
    await create(sid, 1)
    headers = [(b"host", HOST.encode()), (b"origin", ORIGIN.encode()), (b"cookie", f"{settings.SESSION_COOKIE_NAME}={session_cookie}".encode())]
    communicator = WebsocketCommunicator(application, f"/ws/sessions/{sid}/live", headers=headers)
    communicator.scope["query_string"] = b"view=raw&first=\xb2"
    opened.append(communicator)
    connected, _ = await communicator.connect(timeout=WAIT)
    assert connected
    await append(sid, 1)
    assert 'data-last-seq="1"' in await communicator.receive_from(timeout=WAIT)
    await communicator.disconnect()


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
@pytest.mark.usefixtures("slow_poll", "fresh_layer")
async def test_an_api_socket_given_a_unicode_digit_closes_4400(sid, token):
    await create(sid, 1)
    communicator = WebsocketCommunicator(
        application, f"/ws/v1/sessions/{sid}/events?after=%C2%B2", headers=[(b"authorization", f"Bearer {token}".encode())]
    )
    opened.append(communicator)
    connected, _ = await communicator.connect(timeout=WAIT)
    assert connected and await closed_with(communicator) == 4400


# Numbers too long to convert (Python's int-str limit, 4,300 digits) -------------------------

TOO_LONG = "9" * (MAX_DIGITS + 1)
PAGE, TOKENS = "/sessions/digits/", "/projects/default/tokens"
# Every numeric parameter of every page and form: (name, method, path, data).
NUMERIC_PARAMETERS = [
    ("before", "GET", PAGE, {"view": "raw", "before": TOO_LONG}),
    ("before", "GET", "/sessions/digits/blocks", {"before": TOO_LONG}),
    ("turn", "GET", "/sessions/digits/pages", {"turn": TOO_LONG, "page": "1"}),
    ("page", "GET", "/sessions/digits/pages", {"turn": "0", "page": TOO_LONG}),
    ("seq", "GET", "/sessions/digits/pages", {"seq": TOO_LONG}),
    ("highlight", "GET", PAGE, {"highlight": f"{TOO_LONG}-3"}),
    ("highlight", "GET", PAGE, {"highlight": f"1-{TOO_LONG}"}),
    ("boundary", "GET", "/sessions/digits/fork", {"boundary": TOO_LONG}),
    ("boundary", "POST", "/sessions/digits/fork", {"boundary": TOO_LONG, "id": "child"}),
    ("owner", "GET", TOKENS, {"owner": TOO_LONG}),
    ("owner", "POST", TOKENS, {"owner": TOO_LONG, "scopes": "read"}),
    ("expires_in_days", "POST", TOKENS, {"owner": "{admin}", "scopes": "read", "expires_in_days": TOO_LONG}),
    ("next_seq", "POST", "/sessions/digits/recovery", {"next_seq": TOO_LONG, "digest": "0" * 64}),
    ("seq", "GET", "/sessions/digits/notes", {"seq": TOO_LONG, "text": "a note"}),
    ("seq", "POST", "/sessions/digits/notes", {"seq": TOO_LONG, "text": "a note"}),
    # The API's, read by django-ninja; the events lane reads plain short ones itself (dashboard/lanes.py).
    ("since", "GET", "/api/v1/sessions/digits/events", {"since": TOO_LONG}),
    ("limit", "GET", "/api/v1/sessions/digits/events", {"limit": TOO_LONG}),
]
# Every numeric parameter of the sockets (each closes 4400).
SOCKET_PARAMETERS = ["after", "first", "next_seq"]
# Read by Django form fields, which refuse what they cannot convert themselves.
FORM_FIELD_PARAMETERS = {"expires_in_days"}


def numeric_parameters_in_the_code() -> set[str]:
    """The `name` of every call of sessions_app.lib.params.decimal_int in dashboard/."""
    names = set()
    for module in (Path(__file__).resolve().parents[2] / "dashboard").rglob("*.py"):
        for node in ast.walk(ast.parse(module.read_text())):
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
                continue
            if node.func.id == "decimal_int":
                (name,) = [k.value.value for k in node.keywords if k.arg == "name" and isinstance(k.value, ast.Constant)] or [None]
                assert name is not None, f"{module.name}:{node.lineno}: decimal_int without a literal name"
                names.add(name)
    return names


def test_the_lists_hold_every_numeric_parameter_the_code_reads():
    listed = {name for name, *_ in NUMERIC_PARAMETERS} - FORM_FIELD_PARAMETERS
    assert numeric_parameters_in_the_code() == listed | set(SOCKET_PARAMETERS)


def test_no_page_or_socket_converts_a_number_but_through_the_helper():
    """int() and float() of request input anywhere else would bring the 500 back (settings read the environment)."""
    # turnlog.py: a template filter of stored values; variables.py: the settings' values, checked as settings.py reads them
    allowed = {"params.py", "settings.py", "turnlog.py", "variables.py"}
    for module in (Path(__file__).resolve().parents[2] / "dashboard").rglob("*.py"):
        if module.name in allowed:
            continue
        calls = [
            node.lineno
            for node in ast.walk(ast.parse(module.read_text()))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in {"int", "float"}
        ]
        assert not calls, f"{module.name} converts numbers itself at lines {calls}"


def test_a_number_longer_than_python_converts_is_a_bad_parameter():
    with pytest.raises(BadParameter, match="before"):
        decimal_int(TOO_LONG, name="before")
    assert decimal_int("9" * MAX_DIGITS, name="before") == int("9" * MAX_DIGITS)


@pytest.mark.django_db
@pytest.mark.parametrize("name, method, path, data", NUMERIC_PARAMETERS, ids=[f"{m} {p} {n}" for n, m, p, _ in NUMERIC_PARAMETERS])
def test_a_too_long_number_in_any_numeric_parameter_answers_4xx(client, django_user_model, name, method, path, data):
    stored("digits", 3)
    admin = django_user_model.objects.create_user("admin")
    member(admin, Role.ADMIN)
    client.force_login(admin)
    data = {key: value.format(admin=admin.pk) for key, value in data.items()}
    response = client.get(path, data) if method == "GET" else client.post(path, data)
    assert 400 <= response.status_code < 500
    if response.status_code == 400:
        assert name in response.content.decode()


@pytest.mark.parametrize(
    "path",
    [
        "/ws/sessions/{sid}/live?after={n}",
        "/ws/sessions/{sid}/live?view=raw&first={n}&after=0",
        "/ws/sessions/{sid}/recovery/live?next_seq={n}&digest=" + "0" * 64 + "&after=0",
        "/ws/sessions/{sid}/recovery/live?next_seq=0&digest=" + "0" * 64 + "&after={n}",
    ],
)
@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
@pytest.mark.usefixtures("slow_poll", "fresh_layer")
async def test_a_page_socket_given_a_too_long_number_closes_4400(sid, session_cookie, path):
    await create(sid, 1)
    page = await browser_socket(path.format(sid=sid, n=TOO_LONG), session_cookie)
    assert await closed_with(page) == 4400


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
@pytest.mark.usefixtures("slow_poll", "fresh_layer")
async def test_an_api_socket_given_a_too_long_number_closes_4400(sid, token):
    await create(sid, 1)
    communicator = WebsocketCommunicator(
        application, f"/ws/v1/sessions/{sid}/events?after={TOO_LONG}", headers=[(b"authorization", f"Bearer {token}".encode())]
    )
    opened.append(communicator)
    connected, _ = await communicator.connect(timeout=WAIT)
    assert connected and await closed_with(communicator) == 4400
