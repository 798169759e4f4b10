"""The page a throttled login gets (django-axes' AXES_LOCKOUT_CALLABLE).

django-axes counts failed logins per username and client address (settings:
AXES_*); once a pair is locked, its login posts, right password included, are
answered with this 429 until the cool-off has passed since its last attempt or
an administrator removes the access attempt.
"""

from __future__ import annotations

from datetime import timedelta

from axes.helpers import get_client_username, get_cool_off, get_failure_limit
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils import timezone


def client_address(request: HttpRequest) -> str | None:
    """The address failed logins are counted under.

    Behind the trusted proxy (TURNLOG_BEHIND_PROXY) every request comes from
    the proxy, which would lock a username out for everyone; the client is the
    address the proxy appended last to X-Forwarded-For (earlier entries are
    whatever the client wrote, never trusted).
    """
    return address_of(request.META.get("REMOTE_ADDR"), request.META.get("HTTP_X_FORWARDED_FOR", ""))


def address_of(remote_address: str | None, forwarded_for: str) -> str | None:
    """client_address's rule, from the connection's address and the X-Forwarded-For header (the access log's too)."""
    if settings.TURNLOG_BEHIND_PROXY:
        appended = forwarded_for.rsplit(",", 1)[-1].strip()
        if appended:
            return appended
    return remote_address


def wait_text(cool_off: timedelta) -> str:
    """'15 minutes', or in seconds when the cool-off is not whole minutes."""
    seconds = round(cool_off.total_seconds())
    if seconds % 60:
        return f"{seconds} second{'s' if seconds != 1 else ''}"
    minutes = seconds // 60
    return f"{minutes} minute{'s' if minutes != 1 else ''}"


def lockout_response(request: HttpRequest, original_response: HttpResponse | None = None, credentials: dict | None = None) -> HttpResponse:
    # Defaults: axes' async middleware calls this with (request, credentials)
    # in the wrong position, or without; the username then comes from the POST.
    if not isinstance(credentials, dict):
        credentials = original_response if isinstance(original_response, dict) else None
    cool_off = get_cool_off(request)
    attempt_time = getattr(request, "axes_attempt_time", None) or timezone.now()
    response = TemplateResponse(
        request,
        "registration/locked_out.html",
        {
            "username": get_client_username(request, credentials) or "",
            "failure_limit": get_failure_limit(request, credentials),
            "wait": wait_text(cool_off),
            "retry_at": attempt_time + cool_off,
        },
        status=settings.AXES_HTTP_RESPONSE_CODE,
    )
    response["Retry-After"] = str(max(1, round(cool_off.total_seconds())))
    return response.render()
