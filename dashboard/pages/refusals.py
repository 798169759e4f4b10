"""Refusals of pages as pages: a 403 (PermissionDenied anywhere, the admin's included), a
failed CSRF check and a query parameter a page cannot use (a 400) render the site's styled
page, with the header and a way on, instead of Django's bare ones. Under /api/ they stay JSON
in the API's error shape (docs/api.md)."""

from __future__ import annotations

from django.http import JsonResponse
from django.shortcuts import render


def is_api(request) -> bool:
    return request.path.startswith("/api/")


def permission_denied(request, exception=None):
    """handler403: why (the refusal's words, e.g. "your role in project x may not fork sessions"), and where to go."""
    detail = str(exception or "") or "you may not use this page"
    if is_api(request):
        return JsonResponse({"detail": detail, "error": "forbidden"}, status=403)
    return render(request, "403.html", {"detail": detail}, status=403)


def csrf_failure(request, reason: str = ""):
    """CSRF_FAILURE_VIEW: a form posted from a page that is too old (or not this site's), which nothing was done for."""
    if is_api(request):
        return JsonResponse({"detail": f"CSRF check failed: {reason}", "error": "forbidden"}, status=403)
    return render(request, "403_csrf.html", {"reason": reason}, status=403)


def bad_request(request, *, parameter: str, detail: str):
    """A page's answer to a query parameter it cannot use: the styled 400 naming it and why; nothing is done."""
    if is_api(request):
        return JsonResponse({"detail": detail, "error": "bad_request"}, status=400)
    return render(request, "400.html", {"parameter": parameter, "detail": detail.rstrip(".")}, status=400)


def bad_request_handler(request, exception=None):
    """handler400 (a SuspiciousOperation or BadRequest raised anywhere): the same page, without a parameter to name."""
    return bad_request(request, parameter="", detail=str(exception or "") or "the request could not be read")
