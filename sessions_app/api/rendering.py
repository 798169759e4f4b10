"""Answers an endpoint serialises itself, for reads whose answer is large and built to its schema."""

from __future__ import annotations

import json

import orjson
from django.http import HttpResponse


def json_answer(payload: dict, *, status: int = 200) -> HttpResponse:
    """`payload` as a JSON answer, serialised by orjson.

    For an endpoint whose payload has its declared schema by construction
    (its `response=` still documents it): django-ninja's validation and
    renderer of a page of events cost several times the view's own reads
    (docs/performance.md, "OTLP ingest"). What orjson refuses, integers past
    64 bits above all, which events may hold, goes through json as ninja's
    renderer would.
    """
    try:
        body = orjson.dumps(payload)
    except orjson.JSONEncodeError:
        body = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode()
    return HttpResponse(body, status=status, content_type="application/json; charset=utf-8")
