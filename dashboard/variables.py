"""Every environment variable Turnlog's server reads: its kind, default and meaning, in one table.

dashboard/settings.py reads them; `turnlog check` validates their values against this table before anything starts;
deploy/turnlog.env.sample is written from it (`python -m dashboard.variables > deploy/turnlog.env.sample`); and
tests compare it both ways with the names the code reads, the sample and docs/settings.md.
"""

from __future__ import annotations

from dataclasses import dataclass

FLAG_VALUES = {"1", "true", "yes", "on", "0", "false", "no", "off", ""}


@dataclass(frozen=True)
class Variable:
    name: str
    kind: str  # text, int, float, flag or choice
    default: str  # as the sample shows it
    doc: str
    minimum: float | None = None  # for int and float
    above: bool = False  # the minimum itself is refused
    choices: tuple[str, ...] = ()


V = Variable
GROUPS: list[tuple[str, list[Variable]]] = [
    ("Storage and processes", [
        V("DATABASE_URL", "text", "a SQLite file, turnlog.sqlite3 in TURNLOG_DATA_DIR",
          "The database, e.g. postgres://turnlog@127.0.0.1:5432/turnlog"),
        V("TURNLOG_DATA_DIR", "text", "var/ in the source tree; installed, the user's data directory",
          "Where Turnlog writes at runtime: the SQLite database, the development secret key (created mode 0700)"),
        V("REDIS_URL", "text", "unset: the in-memory channel layer (one process)",
          "Redis for the live pages and streams across several server processes, e.g. redis://127.0.0.1:6379/0"),
        V("TURNLOG_DB_POOL_SIZE", "int", "16", "PostgreSQL only: the most pooled connections per process", minimum=1),
        V("TURNLOG_DB_POOL_TIMEOUT", "float", "20",
          "PostgreSQL pool only: seconds a request waits for a connection before its 503", minimum=0, above=True),
        V("TURNLOG_DB_THREADS", "int", "4",
          "Threads per process for the database work of appends and reads; 0 runs it on the request's thread", minimum=0),
        V("TURNLOG_DB_PREPARED_STATEMENTS", "flag", "on",
          "PostgreSQL only: prepare the append's statements; 0 behind PgBouncer in transaction mode before 1.21"),
        V("DJANGO_CONN_MAX_AGE", "int", "0", "Seconds to keep a connection open instead (turns the PostgreSQL pool off)", minimum=0),
    ]),
    ("First start (applied once, by migrate)", [
        V("TURNLOG_INIT_ADMIN_USERNAME", "text", "unset: turnlog serve and make run create a user admin with a random password",
          "The first admin (a superuser), created by the migration step unless the user exists"),
        V("TURNLOG_INIT_ADMIN_PASSWORD_FILE", "text", "unset",
          "A file holding the first admin's password (never the password in the environment); an existing admin's is not reset"),
        V("TURNLOG_INIT_PROJECT", "text", "unset: the project default", "The slug of a project to create, the first admin its admin"),
        V("TURNLOG_INIT_TOKEN", "text", "unset",
          "An API token you chose for the first admin in that project: tl_ and 43 characters among A-Z a-z 0-9 - _"),
        V("TURNLOG_INIT_TOKEN_SCOPES", "text", "read,append,fork,recover", "Comma-separated scopes of that token"),
    ]),
    ("Security", [
        V("TURNLOG_ENV", "choice", "development",
          "production refuses to start without DJANGO_SECRET_KEY and turns on the HTTPS settings below",
          choices=("development", "production")),
        V("DJANGO_SECRET_KEY", "text", "development: a key generated once into TURNLOG_DATA_DIR/secret_key",
          "Required in production (50+ random characters), the same in every process"),
        V("DJANGO_DEBUG", "flag", "off", "Django's debug pages; refused in production"),
        V("DJANGO_SECURE_SSL_REDIRECT", "flag", "on in production", "Redirect plain HTTP to HTTPS"),
        V("DJANGO_SECURE_HSTS_SECONDS", "int", "31536000 in production, else 0", "Strict-Transport-Security max-age", minimum=0),
        V("DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS", "flag", "on in production", "HSTS for subdomains too"),
        V("DJANGO_SECURE_HSTS_PRELOAD", "flag", "on in production", "HSTS preload (consent to browsers' preload lists)"),
        V("DJANGO_SECURE_COOKIES", "flag", "on in production", "Session and CSRF cookies over HTTPS only"),
        V("TURNLOG_BEHIND_PROXY", "flag", "on in production",
          "Trust X-Forwarded-Proto, X-Forwarded-Host and the last X-Forwarded-For from a TLS-terminating proxy"),
        V("DJANGO_ALLOWED_HOSTS", "text", "localhost,127.0.0.1,[::1],testserver", "Comma-separated host names the site answers to"),
        V("DJANGO_CSRF_TRUSTED_ORIGINS", "text", "empty",
          "Comma-separated origins (https://turnlog.example.com) for form posts and login-cookie websockets behind a proxy"),
    ]),
    ("Logs", [
        V("DJANGO_LOG_LEVEL", "choice", "WARNING", "The root logger's level",
          choices=("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")),
        V("TURNLOG_LOG_FORMAT", "choice", "text", "json: every log line one JSON object, plus an access log",
          choices=("text", "json")),
    ]),
    ("Sessions and recovery", [
        V("TURNLOG_STALL_SECONDS", "int", "120", "Quiet time after which an open turn reads stalled"),
        V("TURNLOG_CLOCK_SKEW_SECONDS", "float", "300",
          "Where an event's claimed time and its receive time differ by more, the pages say so", minimum=0),
        V("TURNLOG_WORKER_INTERVAL_SECONDS", "float", "30", "Seconds between two rounds of the recovery worker", minimum=0, above=True),
        V("TURNLOG_RECEIPT_SWEEP_BATCH", "int", "2000",
          "Calls per transaction when the worker re-reads receipts after a tool policy changed", minimum=1),
    ]),
    ("Limits", [
        V("TURNLOG_MAX_BATCH_EVENTS", "int", "5000", "The most events in one append (413 beyond)", minimum=1),
        V("TURNLOG_MAX_REQUEST_BYTES", "int", "16777216", "The largest request body (413 beyond)", minimum=1),
        V("TURNLOG_OTLP_MAX_BODY_BYTES", "int", "16777216", "The largest OTLP export body, once inflated (413 beyond)", minimum=1),
        V("TURNLOG_WS_MAX_MESSAGE_BYTES", "int", "6 x the larger of the two limits above, plus 64 KiB",
          "The largest websocket message; a smaller value than the default is refused at startup", minimum=1),
    ]),
    ("Live pages and streams", [
        V("TURNLOG_SOCKET_RENEW_SECONDS", "float", "3600",
          "A page's live socket is closed (4012) and reconnected after this long", minimum=0, above=True),
        V("TURNLOG_PAGE_REFRESH_SECONDS", "float", "15",
          "How often open pages re-check what changes with no event (a status turning stalled)", minimum=0, above=True),
        V("TURNLOG_CREDENTIAL_CHECK_SECONDS", "float", "2",
          "How often each process checks its open streams' credentials (expired ones close, 4401)", minimum=0, above=True),
    ]),
    ("Logins and invitations", [
        V("TURNLOG_LOGIN_FAILURE_LIMIT", "int", "5", "Failed logins of one username from one address before a 429", minimum=1),
        V("TURNLOG_LOGIN_COOLOFF_MINUTES", "float", "15", "Minutes without an attempt before a locked-out pair may log in again", minimum=0),
        V("TURNLOG_INVITATION_LINK_SECONDS", "int", "259200", "How long an invitation's set-password link works (once)",
          minimum=0, above=True),
    ]),
    ("Email (invitations only)", [
        V("DJANGO_EMAIL_HOST", "text", "empty: no email", "An SMTP server: invitation links are emailed too"),
        V("DJANGO_EMAIL_PORT", "int", "25", "Its port", minimum=1),
        V("DJANGO_EMAIL_HOST_USER", "text", "empty", "Its login"),
        V("DJANGO_EMAIL_HOST_PASSWORD", "text", "empty", "Its password"),
        V("DJANGO_EMAIL_USE_TLS", "flag", "off", "STARTTLS"),
        V("DJANGO_EMAIL_USE_SSL", "flag", "off", "Implicit TLS"),
        V("DJANGO_DEFAULT_FROM_EMAIL", "text", "turnlog@localhost", "The sender of invitation emails"),
    ]),
    ("Alerts", [
        V("TURNLOG_BASE_URL", "text", "http://127.0.0.1:8000", "The site's address as people reach it, for links in alerts"),
        V("TURNLOG_WEBHOOK_ALLOW_PRIVATE", "flag", "off", "Let webhooks and reconcilers reach loopback and private addresses"),
        V("TURNLOG_WEBHOOK_TIMEOUT_SECONDS", "float", "10", "One webhook attempt's time limit", minimum=0, above=True),
        V("TURNLOG_WEBHOOK_MAX_ATTEMPTS", "int", "8", "Attempts of one delivery before it is marked failed", minimum=1),
        V("TURNLOG_WEBHOOK_RETRY_SECONDS", "float", "30", "The wait before a delivery's first retry, doubled for each next one",
          minimum=0, above=True),
        V("TURNLOG_RECONCILER_TIMEOUT_SECONDS", "float", "10", "One reconciler request's time limit", minimum=0, above=True),
        V("TURNLOG_RECONCILER_THREADS", "int", "4", "Reconciler requests the worker makes at once", minimum=1),
    ]),
    ("Metrics", [
        V("TURNLOG_METRICS_BIND", "text", "empty: GET /metrics only",
          "HOST:PORT where the recovery worker also serves the metrics scrape, without a token"),
        V("PROMETHEUS_MULTIPROC_DIR", "text", "unset: each process serves its own metrics",
          "A directory every Turnlog process of the machine shares, so /metrics adds them all up"),
    ]),
    ("OTLP ingest", [
        V("TURNLOG_OTLP_SETTLE_SECONDS", "float", "5", "A finished run's turn closes once its trace has been quiet this long", minimum=0),
        V("TURNLOG_OTLP_CLOSER", "flag", "on", "The server process closes the finished runs it received (off: the worker only)"),
    ]),
]  # fmt: skip
VARIABLES = {variable.name: variable for _, group in GROUPS for variable in group}
# Read, but not settings of the file: TURNLOG_CONFIG names the file itself, DJANGO_SETTINGS_MODULE is the
# commands' own; the client examples read TURNLOG_URL and TURNLOG_TOKEN (docs/settings.md, "Not settings").
# NOTIFY_SOCKET and WATCHDOG_USEC are systemd's, set by a Type=notify unit (sessions_app/lib/notify_systemd.py).
NOT_SETTINGS = {"TURNLOG_CONFIG", "DJANGO_SETTINGS_MODULE", "TURNLOG_URL", "TURNLOG_TOKEN", "NOTIFY_SOCKET", "WATCHDOG_USEC"}
# Django's own (createsuperuser --noinput, the terminal's colours, the autoreloader...): not unknown to `turnlog check`.
DJANGO_OWN = {
    "DJANGO_SUPERUSER_USERNAME", "DJANGO_SUPERUSER_EMAIL", "DJANGO_SUPERUSER_PASSWORD", "DJANGO_COLORS",
    "DJANGO_ALLOW_ASYNC_UNSAFE", "DJANGO_AUTORELOAD_ENV", "DJANGO_WATCHMAN_TIMEOUT", "DJANGO_RUNSERVER_HIDE_WARNING",
    "DJANGO_TEST_PROCESSES", "DJANGO_AUTO_COMPLETE",
}  # fmt: skip
KNOWN = set(VARIABLES) | NOT_SETTINGS | DJANGO_OWN


def value_problem(variable: Variable, value: str) -> str | None:
    """What is wrong with `value` for `variable`, as settings.py would read it, or None."""
    shown = value if len(value) <= 40 else value[:37] + "..."
    if variable.kind in ("int", "float"):
        if variable.name == "TURNLOG_WS_MAX_MESSAGE_BYTES" and not value:
            return None  # empty: the default
        try:
            number = int(value) if variable.kind == "int" else float(value)
        except ValueError:
            expected = "a whole number" if variable.kind == "int" else "a number"
            return f"{variable.name} is {shown!r}, not {expected}"
        if variable.minimum is not None and (number <= variable.minimum if variable.above else number < variable.minimum):
            bound = "above" if variable.above else "at least"
            return f"{variable.name} is {shown!r}: it must be {bound} {variable.minimum:g}"
    elif variable.kind == "flag" and value.strip().lower() not in FLAG_VALUES:
        return f"{variable.name} is {shown!r}, not a flag (1, true, yes, on; or 0, false, no, off): it reads as off"
    elif variable.kind == "choice":
        normalized = value.strip() if variable.name == "DJANGO_LOG_LEVEL" else value.strip().lower()
        if normalized not in variable.choices:
            return f"{variable.name} is {shown!r}, not one of {', '.join(variable.choices)}"
    return None


def sample() -> str:
    """deploy/turnlog.env.sample: every variable, commented out at its default, with what it does."""
    lines = [
        "# Turnlog's configuration: copy to /etc/turnlog.env (root:turnlog, mode 0640), or name it with TURNLOG_CONFIG.",
        "# Read by `turnlog` and `manage.py` (and systemd's EnvironmentFile=): KEY=VALUE lines, # or ; comments,",
        "# optional \"double\" or 'single' quotes, a backslash at a line's end joins the next; no comment after a value.",
        "# A variable set in the process environment wins over this file. `turnlog check` validates it.",
        "# Every variable Turnlog reads is below, commented out, with its default; docs/settings.md says more.",
        "# Flags are on for 1, true, yes or on.",
        "# Written by: python -m dashboard.variables > deploy/turnlog.env.sample",
    ]
    for title, group in GROUPS:
        lines += ["", f"## {title}"]
        for variable in group:
            lines += [f"# {variable.doc}. Default: {variable.default}.", f"#{variable.name}="]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(sample(), end="")
