"""Alerts: webhooks told when a session stalls, is recovered, or is held for a person (docs/guide/alerts.md).

transitions.py writes one notification per transition (recoveries in their own transaction, stalls by the
worker) and its pending deliveries; delivery.py sends them, signed (Standard Webhooks), with retries;
addresses.py keeps them (and reconcilers) off non-public addresses; endpoints.py is how project admins change the endpoints.
"""

from .delivery import Sent, send_due
from .endpoints import EndpointRefused, create_endpoint, delete_endpoint, update_endpoint
from .transitions import record, record_stalls

__all__ = ["EndpointRefused", "Sent", "create_endpoint", "delete_endpoint", "record", "record_stalls", "send_due", "update_endpoint"]
