"""A project's Prices page: its own model prices, and the models its sessions used with the price a call of each is
charged at now (its own, else the bundled genai-prices data, or none). Every member reads it; its admins add and
remove prices (sessions_app.services.prices), and the worker prices the stored costs again within a round.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, time

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from dashboard.pages.projects import members_read_admins_change
from sessions_app.lib.errors import InvalidPrice, PriceNotFound
from sessions_app.log import pricing
from sessions_app.log.events import format_time
from sessions_app.selectors import prices as price_reads
from sessions_app.services import prices

RATE_HELP = "USD per million tokens"


def _rate(label: str, *, required: bool, help_text: str = RATE_HELP) -> forms.DecimalField:
    return forms.DecimalField(
        label=label, required=required, min_value=0, max_digits=14, decimal_places=prices.PLACES, help_text=help_text,
    )  # fmt: skip


class PriceForm(forms.Form):
    model = forms.CharField(max_length=prices.MODEL_MAX, help_text="as the calls' metadata names it, such as gpt-4o")
    provider = forms.CharField(required=False, max_length=prices.PROVIDER_MAX, help_text="empty: any provider of the model")
    valid_from_date = forms.DateField(label="Valid from (UTC date)", widget=forms.DateInput(attrs={"type": "date"}))
    valid_from_hour = forms.TypedChoiceField(
        label="Hour (UTC)", coerce=int, initial=0, choices=[(hour, f"{hour:02d}:00") for hour in range(24)]
    )
    input = _rate("Input", required=True)
    output = _rate("Output", required=True)
    cache_read = _rate("Cache read", required=False, help_text=f"{RATE_HELP}; empty: the input rate")
    cache_write = _rate("Cache write", required=False, help_text=f"{RATE_HELP}; empty: the input rate")
    reasoning = _rate("Reasoning", required=False, help_text=f"{RATE_HELP}; empty: the output rate")

    FIELD_OF = {"valid_from": "valid_from_date"}


@dataclass(frozen=True)
class PriceLine:
    """A price as the page shows it: rates as decimal strings, "" where the fallback rate applies."""

    model: str
    provider: str
    valid_from: datetime
    rates: dict[str, str]

    @property
    def key(self) -> str:
        return format_time(self.valid_from)


def line_of(price: pricing.Price) -> PriceLine:
    rates = {name: "" if getattr(price, name) is None else pricing.text(getattr(price, name)) for name in prices.RATES}
    return PriceLine(price.model, price.provider, price.valid_from, rates)


@login_required
@require_http_methods(["GET", "POST"])
def project_prices(request, slug: str):
    """GET: the page; POST (admins): add a price (replacing one of the same model, provider and hour) or remove one."""
    found = members_read_admins_change(request, slug)
    if not isinstance(found, tuple):
        return found
    actor, project, is_admin = found
    if request.method != "POST":
        return prices_page(request, project, is_admin, PriceForm(initial={"valid_from_date": datetime.now(UTC).date()}))
    if request.POST.get("action") == "remove":
        return _remove(request, actor, project)
    form = PriceForm(request.POST)
    if not form.is_valid():
        return prices_page(request, project, is_admin, form, status=422)
    values = dict(form.cleaned_data)
    hour = time(values.pop("valid_from_hour"), tzinfo=UTC)
    values["valid_from"] = datetime.combine(values.pop("valid_from_date"), hour)
    try:
        row = prices.set_price(actor=actor, project_slug=project.slug, **values)
    except InvalidPrice as refused:
        form.add_error(PriceForm.FIELD_OF.get(refused.field, refused.field if refused.field in form.fields else None), refused.detail)
        return prices_page(request, project, is_admin, form, status=422)
    messages.success(request, f"Saved the price of {row.model} from {row.valid_from:%Y-%m-%d %H:00} UTC. Stored costs follow within a minute.")
    return redirect("project_prices", project.slug)


def _remove(request, actor, project):
    model, provider, valid_from = (request.POST.get(name, "") for name in ("model", "provider", "valid_from"))
    try:
        prices.remove_price(actor=actor, project_slug=project.slug, model=model, provider=provider, valid_from=valid_from)
        messages.success(request, f"Removed the price of {model} from {valid_from}. Stored costs follow within a minute.")
    except PriceNotFound as missing:
        messages.info(request, f"{str(missing).capitalize()}: nothing to remove.")
    except InvalidPrice as refused:
        messages.error(request, refused.detail)
    return redirect("project_prices", project.slug)


def prices_page(request, project, is_admin: bool, form, *, status: int = 200):
    own = [line_of(price_reads.price_of(row)) for row in price_reads.project_prices(project)]
    used = [(model, line_of(model.own or model.bundled) if model.priced_by != "none" else None) for model in price_reads.used_models(project)]
    context = {"project": project, "tab": "prices", "is_admin": is_admin, "own": own, "used": used, "form": form}
    return render(request, "projects/prices.html", context, status=status)
