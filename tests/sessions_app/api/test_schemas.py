"""Schemathesis against the API's own OpenAPI document: every operation, fed
data generated from its schema (valid and invalid), answers without a 5xx,
with a status code the document lists, and with a body its schema allows.

Requests go in-process to the WSGI app (the test database's transaction is
visible to it), authenticated as an operator who may recover. Most path
session ids (70%) name a session that exists: one crashed mid-turn (the
worked example of session-log.md), one closed with a call never answered
(the dangling-call patch applies); the rest are generated (404 for them).
Path call ids likewise name the calls of those sessions most of the time.

Budget: EXAMPLES_PER_OPERATION examples for each of the API's operations,
about a minute per backend on a 2-core machine; a failing check fails pytest.
"""

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.config import SchemathesisConfig
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from sessions_app import services
from sessions_app.log.events import validate_batch
from sessions_app.models import Role
from tests.access import token_for
from tests.sessions_app import factories as f

pytestmark = pytest.mark.django_db

EXAMPLES_PER_OPERATION = 25
SESSIONS = {
    "st-open": f.worked_example(),
    "st-clean": [f.user(), f.event("turn_start", turn=1), f.assistant(calls=["c9"]), f.event("turn_end", turn=1, steps=0, reason="complete")],
}
CONFIG = SchemathesisConfig.from_dict(
    {
        "dictionaries": {"sessions": {"values": list(SESSIONS)}, "calls": {"values": ["c1", "c2", "c3", "c9"]}},
        "parameters": {
            "path.session_id": {"dictionary": "sessions", "probability": 0.7},
            "path.call_id": {"dictionary": "calls", "probability": 0.7},
        },
    }
)
schema = schemathesis.openapi.from_wsgi("/api/v1/openapi.json", get_wsgi_application(), config=CONFIG)
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


@pytest.fixture
def in_test_transaction():
    """The WSGI app may not close the connection that holds the test's transaction
    (Django's test client disconnects the same handlers)."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.fixture
def operator_token(django_user_model, in_test_transaction):
    user = django_user_model.objects.create_user("schema-operator", is_staff=True)
    for session_id, events in SESSIONS.items():
        services.create_session(session_id=session_id)  # the default project, where the token's owner is an operator
        services.append_events(session_id=session_id, events=validate_batch(events))
    return token_for(user, role=Role.OPERATOR)


@schema.parametrize()
@settings(
    max_examples=EXAMPLES_PER_OPERATION,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.filter_too_much],
)
def test_every_operation_answers_as_its_schema_says(case, operator_token):
    case.call_and_validate(headers={"Authorization": f"Bearer {operator_token}"}, checks=CHECKS)
