"""Settings come from the environment; the defaults are the embedded setup.

Embedded: a SQLite file under TURNLOG_DATA_DIR (WAL, IMMEDIATE transactions) and
the in-memory channel layer. Scale-out: DATABASE_URL=postgres://... and
REDIS_URL=redis://... with several Daphne processes.
"""

import os
from datetime import timedelta
from pathlib import Path

import dj_database_url
from csp.constants import NONE, SELF
from django.core.exceptions import ImproperlyConfigured

from dashboard import locations
from dashboard.secret_key import development_secret_key

BASE_DIR = Path(__file__).resolve().parent.parent
# What Turnlog writes at runtime (the SQLite file, the development key): var/ in the source tree,
# the user's data directory when installed from a wheel (dashboard/locations.py).
TURNLOG_DATA_DIR = locations.data_dir(os.environ.get("TURNLOG_DATA_DIR", ""), installed=locations.installed())
# templates/ and static/: the repository's, or the wheel's copies of them.
SITE_FILES_DIR = locations.site_files_dir()


def env_flag(name: str, default: bool = False) -> bool:
    return os.environ.get(name, str(default)).strip().lower() in {"1", "true", "yes", "on"}


# development (the default: `make run`, the tests) or production, which
# refuses to start without its own secret key and serves over HTTPS only.
TURNLOG_ENV = os.environ.get("TURNLOG_ENV", "development").strip().lower()
if TURNLOG_ENV not in {"development", "production"}:
    raise ImproperlyConfigured(f"TURNLOG_ENV must be 'development' or 'production', not {TURNLOG_ENV!r}")
PRODUCTION = TURNLOG_ENV == "production"

DEBUG = env_flag("DJANGO_DEBUG", False)
if PRODUCTION and DEBUG:
    raise ImproperlyConfigured("DJANGO_DEBUG must be off when TURNLOG_ENV=production")
if PRODUCTION:
    SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "").strip()
    if not SECRET_KEY:
        raise ImproperlyConfigured(
            "DJANGO_SECRET_KEY is not set: TURNLOG_ENV=production needs its own secret key "
            "(e.g. python -c 'import secrets; print(secrets.token_urlsafe(50))')"
        )
else:
    SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY") or development_secret_key(TURNLOG_DATA_DIR / "secret_key")
ALLOWED_HOSTS = [h.strip() for h in os.environ.get("DJANGO_ALLOWED_HOSTS", "localhost,127.0.0.1,[::1],testserver").split(",") if h.strip()]
CSRF_TRUSTED_ORIGINS = [
    o.strip() for o in os.environ.get("DJANGO_CSRF_TRUSTED_ORIGINS", "").split(",") if o.strip()
]

# HTTPS in production, each part adjustable (docs/settings.md).
SECURE_SSL_REDIRECT = env_flag("DJANGO_SECURE_SSL_REDIRECT", PRODUCTION)
SECURE_HSTS_SECONDS = int(os.environ.get("DJANGO_SECURE_HSTS_SECONDS", "31536000" if PRODUCTION else "0"))
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_flag("DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS", PRODUCTION)
SECURE_HSTS_PRELOAD = env_flag("DJANGO_SECURE_HSTS_PRELOAD", PRODUCTION)
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = env_flag("DJANGO_SECURE_COOKIES", PRODUCTION)
# Behind a TLS-terminating proxy that sets X-Forwarded-Proto and X-Forwarded-Host
# (and drops any the client sent); without one these headers must not be trusted.
TURNLOG_BEHIND_PROXY = env_flag("TURNLOG_BEHIND_PROXY", PRODUCTION)
if TURNLOG_BEHIND_PROXY:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    USE_X_FORWARDED_HOST = True

# Every page: scripts and styles from static files only (no inline script,
# no eval), the live sockets, no framing. Django's admin works under it too.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF],
        "style-src": [SELF],
        "img-src": [SELF, "data:"],
        "connect-src": [SELF, "ws:", "wss:"],
        "object-src": [NONE],
        "base-uri": [SELF],
        "form-action": [SELF],
        "frame-ancestors": [NONE],
    }
}

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "csp",
    "django_htmx",
    "template_partials",
    "ninja",
    "axes",
    "sessions_app",
    "dashboard",
]

# Django's database sessions; each deleted one (a logout) is told to the open streams' checks at once.
SESSION_ENGINE = "sessions_app.services.logins"

# Four of these run their hooks in the event loop under ASGI (dashboard/middleware.py
# says why). Security, sessions, CSRF and clickjacking stay Django's own classes:
# `check --deploy` looks for them by name, and skips its HSTS, SSL and cookie checks without them.
MIDDLEWARE = [
    # First, so its response hook runs last: it reads who the view found the caller to be (the access log's).
    "dashboard.middleware.AccessLogCallerMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "dashboard.middleware.CSPMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "dashboard.middleware.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "dashboard.middleware.AuthenticationMiddleware",
    "dashboard.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "dashboard.middleware.DatabaseUnavailableMiddleware",
    "dashboard.middleware.BadParameterMiddleware",
    # Last, as django-axes asks: it turns a locked-out login into its 429 page.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "dashboard.urls"
ASGI_APPLICATION = "dashboard.asgi.application"
WSGI_APPLICATION = None

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [SITE_FILES_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

SQLITE_OPTIONS = {
    # IMMEDIATE takes the write lock at BEGIN, so concurrent appends queue
    # instead of failing with "database is locked" on lock upgrade.
    "transaction_mode": "IMMEDIATE",
    "timeout": 20,
    "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
}

DATABASES = {
    "default": dj_database_url.parse(
        os.environ.get("DATABASE_URL") or f"sqlite:///{TURNLOG_DATA_DIR / 'turnlog.sqlite3'}",
        conn_max_age=int(os.environ.get("DJANGO_CONN_MAX_AGE", "0")),
        # A connection the server dropped (a restart, pg_terminate_backend) is
        # replaced before use instead of failing a request: with the pool
        # below, psycopg_pool's ConnectionPool.check_connection on checkout.
        conn_health_checks=True,
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Private: it holds the database, and the secret key beside it.
    TURNLOG_DATA_DIR.mkdir(mode=0o700, parents=True, exist_ok=True)
    DATABASES["default"]["OPTIONS"] = SQLITE_OPTIONS
    # Tests that exercise concurrency need a real file, never :memory:; one per
    # test process so that parallel runs never share it.
    DATABASES["default"]["TEST"] = {"NAME": str(TURNLOG_DATA_DIR / f"test_turnlog_{os.getpid()}.sqlite3")}
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    # The statements every append runs (sessions_app/lib/statements.py, on cursors
    # that bind on the server) are prepared once per connection after psycopg's
    # default 5 runs: planning the append's locked read was half the database's
    # CPU per single append. Django's own queries bind on the client and are
    # never prepared. PgBouncer in transaction mode before 1.21 cannot keep
    # prepared statements: TURNLOG_DB_PREPARED_STATEMENTS=0 turns them off.
    DATABASES["default"].setdefault("OPTIONS", {})["prepare_threshold"] = (
        5 if env_flag("TURNLOG_DB_PREPARED_STATEMENTS", True) else None
    )
    if not DATABASES["default"]["CONN_MAX_AGE"]:
        # Under ASGI every request and every socket's database call would open a
        # new connection (Django closes them after each); a pool keeps them open.
        # Sockets and views share one sync thread per process; the headroom is
        # for threads of management commands and tests.
        DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
            "min_size": 1,
            "max_size": int(os.environ.get("TURNLOG_DB_POOL_SIZE", "16")),
            # Seconds a request waits for a connection (all in use, or the
            # database down) before its 503 (dashboard/middleware.py).
            "timeout": float(os.environ.get("TURNLOG_DB_POOL_TIMEOUT", "20")),
        }


def redis_channel_layer(url: str) -> dict:
    """The Redis channel layer's settings for a Redis at `url` (tests build their own layers with it)."""
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff

    return {
        # channels-redis's layer, made to ride out Redis outages (see the module).
        "BACKEND": "dashboard.live.layer.ResilientRedisChannelLayer",
        "CONFIG": {
            # Passed to redis-py's ConnectionPool.from_url. The process's reader
            # blocks in Redis for up to 5 s (BZPOPMIN): a read timeout (redis-py
            # 8 defaults to 5 s) would end those reads as a Redis failure. Dead
            # peers are found by TCP keepalive and by refused or timed-out
            # connects instead. One retry on a new connection replaces a pooled
            # one that a restarted Redis closed.
            "hosts": [
                {
                    "address": url,
                    "socket_timeout": None,
                    "socket_connect_timeout": 3,
                    "socket_keepalive": True,
                    "retry": Retry(NoBackoff(), 1),
                }
            ],
            "capacity": 1500,
            "expiry": 30,
        },
    }


REDIS_URL = os.environ.get("REDIS_URL", "")
if REDIS_URL:
    CHANNEL_LAYERS = {"default": redis_channel_layer(REDIS_URL)}
else:
    # channels' in-memory layer with a cheaper expiry sweep (dashboard/live/layer.py).
    CHANNEL_LAYERS = {"default": {"BACKEND": "dashboard.live.layer.InMemoryChannelLayer", "CONFIG": {"capacity": 1500}}}

# AxesStandaloneBackend first: it refuses a locked-out login before any
# password is checked (bearer tokens and socket sessions never authenticate()).
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
# Failed logins (the login page's and the admin's) are counted per username
# and client address; at the limit that pair is refused with a 429
# (dashboard/lockout.py) until the cool-off has passed since its last attempt,
# or an administrator deletes its access attempt (admin, or
# `manage.py axes_reset_username`). A success clears the count.
AXES_FAILURE_LIMIT = int(os.environ.get("TURNLOG_LOGIN_FAILURE_LIMIT", "5"))
AXES_COOLOFF_TIME = timedelta(minutes=float(os.environ.get("TURNLOG_LOGIN_COOLOFF_MINUTES", "15")))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_CALLABLE = "dashboard.lockout.lockout_response"
AXES_CLIENT_IP_CALLABLE = "dashboard.lockout.client_address"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

# A page's refusal (403) and a failed CSRF check render the site's own pages (dashboard/pages/refusals.py).
CSRF_FAILURE_VIEW = "dashboard.pages.refusals.csrf_failure"

# An invitation's set-password link (sessions_app/services/invitations.py) works once, for this long.
PASSWORD_RESET_TIMEOUT = int(os.environ.get("TURNLOG_INVITATION_LINK_SECONDS", str(3 * 24 * 3600)))
if PASSWORD_RESET_TIMEOUT <= 0:
    raise ImproperlyConfigured(f"TURNLOG_INVITATION_LINK_SECONDS must be above 0, not {PASSWORD_RESET_TIMEOUT!r}")
# Email is off unless a server is named: then invitation links are emailed too (they are always shown once).
EMAIL_HOST = os.environ.get("DJANGO_EMAIL_HOST", "")
EMAIL_PORT = int(os.environ.get("DJANGO_EMAIL_PORT", "25"))
EMAIL_HOST_USER = os.environ.get("DJANGO_EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = os.environ.get("DJANGO_EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_flag("DJANGO_EMAIL_USE_TLS", False)
EMAIL_USE_SSL = env_flag("DJANGO_EMAIL_USE_SSL", False)
DEFAULT_FROM_EMAIL = os.environ.get("DJANGO_DEFAULT_FROM_EMAIL", "turnlog@localhost")
EMAIL_TIMEOUT = 10

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
# Served by Daphne itself from here (dashboard/asgi.py's StaticFiles), with no collectstatic needed.
STATICFILES_DIRS = [SITE_FILES_DIR / "static"]
STATIC_ROOT = TURNLOG_DATA_DIR / "static"

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "login"

# Request limits of the ingestion API (documented in api.md and the README).
TURNLOG_MAX_BATCH_EVENTS = int(os.environ.get("TURNLOG_MAX_BATCH_EVENTS", "5000"))
TURNLOG_MAX_REQUEST_BYTES = int(os.environ.get("TURNLOG_MAX_REQUEST_BYTES", str(16 * 1024 * 1024)))
# Django enforces it (RequestDataTooBig, answered 413 too_large by the API).
DATA_UPLOAD_MAX_MEMORY_SIZE = TURNLOG_MAX_REQUEST_BYTES

# OTLP ingest (POST /otlp/v1/traces, docs/internals/otlp.md): the largest body once inflated (413 beyond; a gzip or
# deflate body stops inflating at it). The endpoint reads its body itself, so this limit, not the one above, applies.
TURNLOG_OTLP_MAX_BODY_BYTES = int(os.environ.get("TURNLOG_OTLP_MAX_BODY_BYTES", str(16 * 1024 * 1024)))
if TURNLOG_OTLP_MAX_BODY_BYTES < 1:
    raise ImproperlyConfigured(f"TURNLOG_OTLP_MAX_BODY_BYTES must be above 0, not {TURNLOG_OTLP_MAX_BODY_BYTES!r}")
# Under ASGI Django spools a request's body to a temporary file past this size: an OTLP batch of
# 512 chat spans is ~2.7 MB, past the 2.5 MiB default, and writing it out and reading it back was a
# twentieth of its ingest. Bodies up to either limit above stay in memory.
FILE_UPLOAD_MAX_MEMORY_SIZE = max(TURNLOG_MAX_REQUEST_BYTES, TURNLOG_OTLP_MAX_BODY_BYTES)

# Daphne's websocket message limit (docs/api.md, "Websocket message limit"): a stream frame is one event's JSON,
# and a frame over the limit fails the socket, so the limit must hold the largest event a request above can
# make. A character of text becomes at most a 6-byte escape in that JSON (\u007f for a raw DEL or \u00e9
# for an é of a JSON body, \u0001 for a control character of an OTLP/protobuf string); separators, numbers
# and ids grow less; the margin holds the frame's envelope, the seq and time. (Not covered: on PostgreSQL a
# number written with a large exponent reads back with all its digits, 1e308 with 309 of them.)
WS_FRAME_EXPANSION, WS_FRAME_MARGIN = 6, 64 * 1024
WS_MESSAGE_BYTES_NEEDED = WS_FRAME_EXPANSION * max(TURNLOG_MAX_REQUEST_BYTES, TURNLOG_OTLP_MAX_BODY_BYTES) + WS_FRAME_MARGIN
TURNLOG_WS_MAX_MESSAGE_BYTES = int(os.environ.get("TURNLOG_WS_MAX_MESSAGE_BYTES") or WS_MESSAGE_BYTES_NEEDED)
if TURNLOG_WS_MAX_MESSAGE_BYTES < WS_MESSAGE_BYTES_NEEDED:
    raise ImproperlyConfigured(
        f"TURNLOG_WS_MAX_MESSAGE_BYTES is {TURNLOG_WS_MAX_MESSAGE_BYTES}, below the {WS_MESSAGE_BYTES_NEEDED} bytes a stream"
        f" frame of an accepted event can take ({WS_FRAME_EXPANSION} x the larger of TURNLOG_MAX_REQUEST_BYTES and"
        f" TURNLOG_OTLP_MAX_BODY_BYTES, plus {WS_FRAME_MARGIN}): unset it, or lower those limits"
    )
# `make run`'s server (Daphne's runserver) reads these; `turnlog daphne` and `turnlog serve` pass them to Daphne.
DAPHNE_WEBSOCKET_MAX_MESSAGE_SIZE = DAPHNE_WEBSOCKET_MAX_FRAME_SIZE = TURNLOG_WS_MAX_MESSAGE_BYTES

# Threads that run the database work of the append, events and session endpoints
# (sessions_app/lib/db_threads.py: each keeps its connection, on PostgreSQL one from the pool;
# SQLite's appends get one more thread); 0 runs it on the request's own thread, as the in-process tests do.
TURNLOG_DB_THREADS = int(os.environ.get("TURNLOG_DB_THREADS", "4"))
if TURNLOG_DB_THREADS < 0:
    raise ImproperlyConfigured(f"TURNLOG_DB_THREADS must be 0 or more, not {TURNLOG_DB_THREADS!r}")

# A page's live socket is closed (4012) and reconnected from its cursor after this long.
TURNLOG_SOCKET_RENEW_SECONDS = float(os.environ.get("TURNLOG_SOCKET_RENEW_SECONDS", "3600"))

# Seconds between two checks, per watched session, of what its page's header shows that no event changes
# (the status turning stalled with silence alone, a fork of it): the pages are sent the new header.
TURNLOG_PAGE_REFRESH_SECONDS = float(os.environ.get("TURNLOG_PAGE_REFRESH_SECONDS", "15"))
if not TURNLOG_PAGE_REFRESH_SECONDS > 0:
    raise ImproperlyConfigured(f"TURNLOG_PAGE_REFRESH_SECONDS must be above 0, not {TURNLOG_PAGE_REFRESH_SECONDS!r}")

# Seconds between two checks of the tokens of open streams: a revoked or expired token's streams close (4401) within it.
TURNLOG_CREDENTIAL_CHECK_SECONDS = float(os.environ.get("TURNLOG_CREDENTIAL_CHECK_SECONDS", "2"))
if not TURNLOG_CREDENTIAL_CHECK_SECONDS > 0:
    raise ImproperlyConfigured(f"TURNLOG_CREDENTIAL_CHECK_SECONDS must be above 0, not {TURNLOG_CREDENTIAL_CHECK_SECONDS!r}")

# An open turn with no event for this long shows as stalled (likely crashed).
TURNLOG_STALL_SECONDS = int(os.environ.get("TURNLOG_STALL_SECONDS", "120"))
# Where an event's claimed time and its receive time differ by more than this, the pages say by how
# much ("clock ahead by 178 d") on the event and on its session; the claimed time is shown as given.
TURNLOG_CLOCK_SKEW_SECONDS = float(os.environ.get("TURNLOG_CLOCK_SKEW_SECONDS", "300"))
if not TURNLOG_CLOCK_SKEW_SECONDS >= 0:
    raise ImproperlyConfigured(f"TURNLOG_CLOCK_SKEW_SECONDS must be 0 or more, not {TURNLOG_CLOCK_SKEW_SECONDS!r}")
# Seconds between two rounds of `manage.py recovery_worker` (automatic recovery, auto-recovery policies).
TURNLOG_WORKER_INTERVAL_SECONDS = float(os.environ.get("TURNLOG_WORKER_INTERVAL_SECONDS", "30"))
if not TURNLOG_WORKER_INTERVAL_SECONDS > 0:
    raise ImproperlyConfigured(f"TURNLOG_WORKER_INTERVAL_SECONDS must be above 0, not {TURNLOG_WORKER_INTERVAL_SECONDS!r}")
# Calls per transaction when the worker re-reads receipts after a tool policy changed (services.receipts).
TURNLOG_RECEIPT_SWEEP_BATCH = int(os.environ.get("TURNLOG_RECEIPT_SWEEP_BATCH", "2000"))
if not TURNLOG_RECEIPT_SWEEP_BATCH >= 1:
    raise ImproperlyConfigured(f"TURNLOG_RECEIPT_SWEEP_BATCH must be 1 or more, not {TURNLOG_RECEIPT_SWEEP_BATCH!r}")

# Alerts (sessions_app/services/notify, docs/guide/alerts.md): the site's address as people reach it, for the links in webhook
# payloads (the recovery preview); webhooks and reconcilers to non-public addresses (or IPv6 forms carrying one) only when allowed.
TURNLOG_BASE_URL = os.environ.get("TURNLOG_BASE_URL", "http://127.0.0.1:8000").rstrip("/")
TURNLOG_WEBHOOK_ALLOW_PRIVATE = os.environ.get("TURNLOG_WEBHOOK_ALLOW_PRIVATE", "").lower() in ("1", "true", "yes", "on")
# One attempt's time limit; attempts per delivery; the first retry's delay, doubled each time (with jitter).
TURNLOG_WEBHOOK_TIMEOUT_SECONDS = float(os.environ.get("TURNLOG_WEBHOOK_TIMEOUT_SECONDS", "10"))
TURNLOG_WEBHOOK_MAX_ATTEMPTS = int(os.environ.get("TURNLOG_WEBHOOK_MAX_ATTEMPTS", "8"))
TURNLOG_WEBHOOK_RETRY_SECONDS = float(os.environ.get("TURNLOG_WEBHOOK_RETRY_SECONDS", "30"))
if not (TURNLOG_WEBHOOK_TIMEOUT_SECONDS > 0 and TURNLOG_WEBHOOK_MAX_ATTEMPTS >= 1 and TURNLOG_WEBHOOK_RETRY_SECONDS > 0):
    raise ImproperlyConfigured("TURNLOG_WEBHOOK_TIMEOUT_SECONDS and TURNLOG_WEBHOOK_RETRY_SECONDS must be above 0, TURNLOG_WEBHOOK_MAX_ATTEMPTS at least 1")
# Reconcilers (docs/guide/reconcilers.md): one check's time limit, and how many the worker asks at once.
TURNLOG_RECONCILER_TIMEOUT_SECONDS = float(os.environ.get("TURNLOG_RECONCILER_TIMEOUT_SECONDS", "10"))
TURNLOG_RECONCILER_THREADS = int(os.environ.get("TURNLOG_RECONCILER_THREADS", "4"))
if not (TURNLOG_RECONCILER_TIMEOUT_SECONDS > 0 and TURNLOG_RECONCILER_THREADS >= 1):
    raise ImproperlyConfigured("TURNLOG_RECONCILER_TIMEOUT_SECONDS must be above 0, TURNLOG_RECONCILER_THREADS at least 1")

# OTLP ingest (docs/internals/otlp.md): a finished run's turn closes once its trace has been quiet this long, so
# spans exported after the root (other batches, retries) still land inside the turn.
TURNLOG_OTLP_SETTLE_SECONDS = float(os.environ.get("TURNLOG_OTLP_SETTLE_SECONDS", "5"))
if not TURNLOG_OTLP_SETTLE_SECONDS >= 0:
    raise ImproperlyConfigured(f"TURNLOG_OTLP_SETTLE_SECONDS must be 0 or more, not {TURNLOG_OTLP_SETTLE_SECONDS!r}")
# The server process closes the runs it saw finish (sessions_app/api/otlp_closer.py); the in-process tests turn it off.
TURNLOG_OTLP_CLOSER = env_flag("TURNLOG_OTLP_CLOSER", True)

# Prometheus metrics (docs/guide/metrics.md): HOST:PORT where the recovery worker also serves the scrape, without a
# token, for a scraper inside the network (sessions_app/metrics/listener.py); empty: GET /metrics only.
TURNLOG_METRICS_BIND = os.environ.get("TURNLOG_METRICS_BIND", "")
# text: log lines as Python's logging writes them, no access log (Daphne writes its own to stdout);
# json: every log line one JSON object (dashboard/json_logs.py), plus one line per HTTP request and
# per websocket session (dashboard/access_log.py).
TURNLOG_LOG_FORMAT = os.environ.get("TURNLOG_LOG_FORMAT", "text").strip().lower()
if TURNLOG_LOG_FORMAT not in {"text", "json"}:
    raise ImproperlyConfigured(f"TURNLOG_LOG_FORMAT must be 'text' or 'json', not {TURNLOG_LOG_FORMAT!r}")
JSON_LOGS = TURNLOG_LOG_FORMAT == "json"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {
        "without_traceback": {"()": "dashboard.log_filters.WithoutTraceback"},
        "without_secrets": {"()": "dashboard.log_filters.WithoutSecrets"},
    },
    "formatters": {"json": {"()": "dashboard.json_logs.JsonFormatter"}},
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "filters": ["without_secrets"],
            **({"formatter": "json"} if JSON_LOGS else {}),
        }
    },
    "root": {"handlers": ["console"], "level": os.environ.get("DJANGO_LOG_LEVEL", "WARNING")},
    "loggers": {
        # A disallowed Host header: one line, no traceback (dashboard/log_filters.py).
        "django.security.DisallowedHost": {"filters": ["without_traceback"]},
        # The access log's lines are INFO: written in JSON only, whatever DJANGO_LOG_LEVEL says.
        "turnlog.access": {"level": "INFO" if JSON_LOGS else "WARNING"},
    },
}
