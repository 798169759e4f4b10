"""Reads of a project's prices (its Prices page, the API): its own prices, and the models its calls used with
the price each is charged at now (its own, else the bundled `genai-prices` data, or none)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from sessions_app.log import pricing
from sessions_app.models import AgentModelHour, ModelPrice, Project

from .usage import price_of


@dataclass(frozen=True)
class UsedModel:
    """A model (and provider) the project's calls used, and what a call of it costs now."""

    model: str
    provider: str
    calls: int
    own: pricing.Price | None
    bundled: pricing.Price | None

    @property
    def priced_by(self) -> str:
        """project | bundled | none: which price applies to a call made now."""
        return "project" if self.own else "bundled" if self.bundled else "none"


def project_prices(project: Project) -> list[ModelPrice]:
    """The project's own prices, by model, provider and hour."""
    return list(ModelPrice.objects.filter(project=project).order_by("model", "provider", "valid_from"))


def used_models(project: Project, *, now: datetime | None = None) -> list[UsedModel]:
    """Each model and provider the project's calls named (from the per-agent hourly sums: never a log), by model."""
    now = (now or datetime.now(UTC)).replace(minute=0, second=0, microsecond=0)
    pricer = pricing.Pricer(price_of(row) for row in ModelPrice.objects.filter(project=project))
    calls: dict[tuple[str, str], int] = {}
    found = AgentModelHour.objects.filter(project=project).exclude(model="").values_list("model", "provider", "calls")
    for model, provider, count in found:
        calls[(model, provider)] = calls.get((model, provider), 0) + count
    return [
        UsedModel(model, provider, count, pricer.override(model, provider, now), pricing.bundled_price(model, provider, now))
        for (model, provider), count in sorted(calls.items())
    ]
