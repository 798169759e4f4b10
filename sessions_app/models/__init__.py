"""Storage: every model of the app, Django style.

Each model is defined in the submodule of its concern and imported here, so
Django registers them all and `from sessions_app.models import X` (and the
dotted paths migrations hold, such as sessions_app.models.CallIdField) still
resolve.
"""

# Dependencies first (projects < sessions < recovery, audit, notes): Django registers the models in this order.
from sessions_app.models.projects import TOKEN_FORMAT, ApiToken, Membership, Project, Role, Scope, hash_token
from sessions_app.models.sessions import (
    REPLACE_BOUND_MAX,
    SESSION_ID_PATTERN,
    AppendOnlyViolation,
    CallIdField,
    CallSighting,
    Event,
    IdempotentRequest,
    Session,
    open_turn_labels_of,
    session_id_validator,
)
from sessions_app.models.recovery import AgentHour, AutoRecoveryPolicy, RecoveryRecord, ToolPolicy
from sessions_app.models.audit import AuditEntry
from sessions_app.models.otel import OtlpHeldSpan, OtlpSpan, OtlpTrace
from sessions_app.models.notes import Note
from sessions_app.models.ledger import LedgerCall
from sessions_app.models.notify import HELD, KINDS, RECOVERED, STALLED, Delivery, DeliveryAttempt, Notification, WebhookEndpoint, all_kinds, new_secret
from sessions_app.models.usage import AgentModelHour, ModelPrice, UsageSum
from sessions_app.models.verdicts import CallCheck, CheckAttempt, ReceiptSweep, Verdict
