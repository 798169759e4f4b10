"""Token sums and prices (api.md, "Usage and cost").

Sums are kept at append time (sessions_app/services/usage.py), so no page or list reads a log to
show them: per session and turn (`UsageSum`, each model and hour apart so a cost can be priced at
its hour), per agent, model and hour (`AgentModelHour`), and the session's totals on `Session`.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from sessions_app.models.projects import Project
from sessions_app.models.sessions import Session


class TokenCounts(models.Model):
    """The five normalised token kinds (sessions_app/log/usage.py KINDS) and how many model calls they came from."""

    calls = models.PositiveIntegerField(default=0)
    input_tokens = models.BigIntegerField(default=0)
    output_tokens = models.BigIntegerField(default=0)
    cache_read_tokens = models.BigIntegerField(default=0)
    cache_write_tokens = models.BigIntegerField(default=0)
    reasoning_tokens = models.BigIntegerField(default=0)

    class Meta:
        abstract = True


class UsageSum(TokenCounts):
    """A session's usage in one turn, of one model, in one hour (of the events' own times: a price is valid by hour).

    `turn_seq` is the innermost open turn's turn_start seq, or the message's own seq outside every
    turn, so a fork (cut outside every turn) copies exactly the rows below its seed length.
    """

    # No index of its own: usage_sum_unique leads with the session (each index is written on every append with usage).
    session = models.ForeignKey(Session, on_delete=models.PROTECT, related_name="+", db_constraint=False, db_index=False)
    turn_seq = models.PositiveIntegerField()
    model = models.CharField(max_length=200, blank=True, default="")
    provider = models.CharField(max_length=100, blank=True, default="")
    hour = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["session", "turn_seq", "model", "provider", "hour"], name="usage_sum_unique"),
        ]
        indexes = [models.Index(fields=["model", "session"], name="usage_sum_model_idx")]


class AgentModelHour(TokenCounts):
    """An agent's usage of one model in one hour (received), for the Agents page and metrics."""

    # No index of its own: both indexes below lead with the project.
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+", db_index=False)
    agent_name = models.CharField(max_length=200, blank=True, default="")
    model = models.CharField(max_length=200, blank=True, default="")
    provider = models.CharField(max_length=100, blank=True, default="")
    hour = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["project", "agent_name", "model", "provider", "hour"], name="agent_model_hour_unique"),
        ]
        indexes = [models.Index(fields=["project", "hour"], name="agent_model_hour_project_idx")]


class ModelPrice(models.Model):
    """A project's own price of a model, per million tokens of each kind, from a whole UTC hour on.

    Wins over the bundled prices (sessions_app/log/pricing.py). An empty cache or reasoning price
    means the input (cache) or output (reasoning) rate.
    """

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="model_prices")
    model = models.CharField(max_length=200)
    # Empty: any provider of the model.
    provider = models.CharField(max_length=100, blank=True, default="")
    valid_from = models.DateTimeField()
    input = models.DecimalField(max_digits=14, decimal_places=6)
    output = models.DecimalField(max_digits=14, decimal_places=6)
    cache_read = models.DecimalField(max_digits=14, decimal_places=6, null=True, blank=True)
    cache_write = models.DecimalField(max_digits=14, decimal_places=6, null=True, blank=True)
    reasoning = models.DecimalField(max_digits=14, decimal_places=6, null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["project", "model", "provider", "valid_from"], name="model_price_unique"),
        ]
