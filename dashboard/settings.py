"""Django settings, read from the environment through typed helpers (``dashboard.site.env``).

Two shapes, switched by the environment only:

* **production**: ``DATABASE_URL`` (PostgreSQL, psycopg 3) and ``REDIS_URL`` (Celery
  broker + channels-redis layer); runs execute on Celery workers. ``SECRET_KEY`` is
  required, cookies are secure, ``manage.py check --deploy`` passes.
* **embedded** (neither variable set, what ``make run`` uses on a bare machine): SQLite
  under ``var/``, the in-memory channel layer, runs executed one at a time by a thread
  pool inside the web process (``dashboard.runs.inprocess``).

``DATABASE_URL`` alone gives Postgres with the in-process executor; ``REDIS_URL``
decides the executor and the channel layer. Under pytest (``PYTEST_VERSION`` is set by
pytest and inherited by the worker/server subprocesses tests start) a fixed test
``SECRET_KEY`` is used and the HTTPS redirect is off.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import tempfile
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from dashboard.site.env import (
    check_redis_url,
    env_bool,
    env_int,
    env_list,
    env_str,
    parse_database_url,
)

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("DASHBOARD_VAR_DIR", str(BASE_DIR / "var")))

DATABASE_URL = env_str("DATABASE_URL")
REDIS_URL = env_str("REDIS_URL")
if REDIS_URL:
    check_redis_url(REDIS_URL)
EMBEDDED = DATABASE_URL is None and REDIS_URL is None
TESTING = "PYTEST_VERSION" in os.environ
DEBUG = env_bool("DEBUG", False)


def _secret_key() -> str:
    key = env_str("SECRET_KEY")
    if key:
        return key
    if TESTING:
        return "insecure-test-only-key-" + "x" * 40
    if EMBEDDED:
        # The embedded default keeps a generated key so sessions survive restarts.
        path = VAR_DIR / "secret_key"
        if not path.exists():
            VAR_DIR.mkdir(parents=True, exist_ok=True)
            path.write_text(secrets.token_urlsafe(50))
            path.chmod(0o600)
        return path.read_text().strip()
    raise ImproperlyConfigured(
        "SECRET_KEY is required when DATABASE_URL or REDIS_URL is set"
    )


SECRET_KEY = _secret_key()
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "daphne",  # first: makes `runserver` serve ASGI (websockets)
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "ninja",  # serves the API docs' JS/CSS locally instead of from a CDN
    "dashboard.apps.DashboardConfig",
    "dashboard.pages",  # the HTML pages (templates, template tags, forms)
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "dashboard.pages.csp.CSPMiddleware",  # CSP; outside QueryTextMiddleware's 400 page
    "dashboard.site.middleware.QueryTextMiddleware",  # ?x=%00: a 400 naming x
    "dashboard.site.middleware.LoginRequiredMiddleware",
    "dashboard.site.middleware.ApiMethodNotAllowedMiddleware",  # the API's 405 as JSON
    "dashboard.api.query.UnknownQueryParameterMiddleware",  # ?typo= on the API: a 400
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "dashboard.urls"
ASGI_APPLICATION = "dashboard.asgi.application"
WSGI_APPLICATION = None

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
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

# --- database -----------------------------------------------------------------------
if DATABASE_URL:
    _db = parse_database_url(DATABASE_URL)
else:
    _db = {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": str(VAR_DIR / "dashboard.sqlite3"),
    }
if _db["ENGINE"].endswith("sqlite3"):
    # WAL + IMMEDIATE: the in-process executor writes while requests read.
    _db["OPTIONS"] = {
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        "transaction_mode": "IMMEDIATE",
        "timeout": 30,
    }
    if not DATABASE_URL:
        VAR_DIR.mkdir(parents=True, exist_ok=True)
    # A file, not shared-cache memory: the sink's writer thread needs real locking.
    _db["TEST"] = {
        "NAME": os.path.join(
            tempfile.gettempdir(), f"dashboard-test-{os.getpid()}.sqlite3"
        )
    }
else:
    # 0 (a connection per request) by default: under ASGI every request runs its sync
    # code in a thread of its own, and a persistent connection is left behind with that
    # thread, so a busy ingest server ran PostgreSQL out of connections ("too many
    # clients", bench/http_ingest_bench.py). A worker's run keeps its connection for
    # the whole task either way. Raise it only for a WSGI deployment.
    _db["CONN_MAX_AGE"] = env_int("DB_CONN_MAX_AGE", 0, min_value=0)
    _db["CONN_HEALTH_CHECKS"] = True
DATABASES = {"default": _db}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- channels / celery --------------------------------------------------------------
# DASHBOARD_NAMESPACE isolates queues and channel groups of parallel test sessions
# (or several deployments) sharing one Redis.
NAMESPACE = env_str("DASHBOARD_NAMESPACE") or (f"test{os.getpid()}." if TESTING else "")
if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {
                # redis-py 8 defaults socket_timeout to 5 s, which aborts the layer's
                # blocking 5 s BZPOPMIN and kills every consumer (channels_redis#422).
                "hosts": [
                    {
                        "address": REDIS_URL,
                        "socket_timeout": 15,
                        "socket_connect_timeout": 5,
                    }
                ],
                "prefix": f"asgi{NAMESPACE}",
                # A slow socket drops frames (the browser backfills from the API).
                "capacity": 200,
                "expiry": 60,
            },
        }
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

RUN_EXECUTOR = "celery" if REDIS_URL else "inprocess"
# How a launched run reaches its executor: ``submit(run_id, queue)`` of the Celery task
# or of the in-process executor (a dotted path, so the lease code that calls it does
# not import the executors that import it).
RUN_SUBMIT = env_str(
    "RUN_SUBMIT",
    "dashboard.runs.jobs.submit" if REDIS_URL else "dashboard.runs.inprocess.submit",
)
RUN_QUEUE_PREFIX = NAMESPACE
# Queue for runs whose model.device is "auto" (cuda -> gpu, cpu -> cpu).
RUN_QUEUE_AUTO = env_str("RUN_QUEUE_AUTO", "gpu")
if RUN_QUEUE_AUTO not in {"gpu", "cpu"}:
    raise ImproperlyConfigured(f"RUN_QUEUE_AUTO={RUN_QUEUE_AUTO!r} must be gpu or cpu")

# Devices this worker gives one run (dashboard.runs.devices): 0 counts them (the CUDA devices
# it sees, else its CPU cores). A worker consumes the ``-x2`` .. ``-xN`` queues for them.
WORKER_DEVICES = env_int("WORKER_DEVICES", 0, min_value=0, max_value=1024)
# The most processes a run may ask for at submit (config.resources.processes): the
# devices of the deployment's largest worker. 0: this process's own devices in the
# embedded mode, 1 with Celery workers (the web process cannot count theirs).
RUN_MAX_PROCESSES = env_int("RUN_MAX_PROCESSES", 0, min_value=0, max_value=1024)

CELERY_BROKER_URL = REDIS_URL or "memory://"
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Long GPU jobs: acknowledge after the task, take one message at a time, a fresh child
# per task (CUDA is initialised only there), JSON only.
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_WORKER_MAX_TASKS_PER_CHILD = 1
# A broker blip must not kill a training run; the run's lease, not the message, is
# what guarantees a single executor.
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = False
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_DEFAULT_QUEUE = f"{NAMESPACE}cpu"
CELERY_BROKER_TRANSPORT_OPTIONS = {
    # Redis redelivers an unacked message after this long; runs outlive any sane
    # value, so duplicates are expected and harmless (the lease turns them away).
    "visibility_timeout": 24 * 3600,
    # Without these a publish to a broker that accepts connections but never answers
    # waits forever (kombu's default), and so does the launch request that sends it.
    # The worker's BRPOP waits 1 s, inside socket_timeout.
    "socket_connect_timeout": 2,
    "socket_timeout": 3,
}
# One quick retry (a pooled connection gone stale across a Redis restart), then the
# launch gives up on the broker: the run stays queued, unsent, and the reaper's next
# pass sends it (dashboard.runs.lease.send_unsent).
CELERY_TASK_PUBLISH_RETRY_POLICY = {
    "max_retries": 1,
    "interval_start": 0,
    "interval_step": 0.2,
    "interval_max": 0.2,
}
CELERY_TASK_ALWAYS_EAGER = False

# --- runs -----------------------------------------------------------------------------
RUNS_DIR = Path(env_str("RUNS_DIR", str(VAR_DIR / "runs")))  # checkpoints, per run
RUN_TRAINER = env_str("RUN_TRAINER", "trainer.runner.run_from_config")
# Importable modules that register environments, reward components, tools and judges
# (trainer.plugins), comma-separated; the agentic_rl.plugins entry points load too.
PLUGINS = env_list("PLUGINS", [])
RUN_HEARTBEAT_SECONDS = env_int("RUN_HEARTBEAT_SECONDS", 5, min_value=1, max_value=600)
RUN_LEASE_TIMEOUT_SECONDS = env_int("RUN_LEASE_TIMEOUT_SECONDS", 60, min_value=2)
# Queued runs nobody claimed for this long are sent to the broker again (lost messages).
RUN_RESEND_QUEUED_SECONDS = env_int("RUN_RESEND_QUEUED_SECONDS", 900, min_value=10)
RUN_MAX_ATTEMPTS = env_int("RUN_MAX_ATTEMPTS", 3, min_value=1, max_value=100)
RUN_MAX_ACTIVE_PER_USER = env_int("RUN_MAX_ACTIVE_PER_USER", 4, min_value=1)
RUN_FRAME_INTERVAL_MS = env_int("RUN_FRAME_INTERVAL_MS", 100, min_value=10)
# A cancelled run that has not stopped this long after the cancel is marked cancelled
# and its process terminated (dashboard.runs.stopping).
RUN_CANCEL_GRACE_SECONDS = env_int(
    "RUN_CANCEL_GRACE_SECONDS", 10, min_value=1, max_value=3600
)
# A paused run is given this long to reach its next step and keep its state there
# (a step of several processes checks only between steps); past it, it is paused
# from its last checkpoint and its process terminated.
RUN_PAUSE_GRACE_SECONDS = env_int(
    "RUN_PAUSE_GRACE_SECONDS", 300, min_value=1, max_value=86400
)
# Refused at submit (trainer.budget, dashboard.runs.budget): a step of more tokens
# than this, or whose memory estimate is over RUN_MAX_STEP_MEMORY_MB (0: the memory
# of the largest live worker that serves the run, this machine's in the embedded mode).
RUN_MAX_TOKENS_PER_STEP = env_int("RUN_MAX_TOKENS_PER_STEP", 1 << 24, min_value=1)
RUN_MAX_STEP_MEMORY_MB = env_int("RUN_MAX_STEP_MEMORY_MB", 0, min_value=0)
# Workers announce what they serve every WORKER_ANNOUNCE_SECONDS (a Worker row); a run
# no live worker serves is refused at submit (the embedded mode asks its own devices).
# Off under pytest unless a test turns it on: most tests launch with no worker at all.
WORKER_ANNOUNCE_SECONDS = env_int("WORKER_ANNOUNCE_SECONDS", 15, min_value=1)
RUN_REFUSE_UNSERVED = env_bool("RUN_REFUSE_UNSERVED", not TESTING)
# Alert webhooks (/settings/, dashboard.ingest.webhooks): a POST takes this long at
# most, as a whole (lookup, connect, send, the answer's headers), however slowly the
# receiver answers; DASHBOARD_URL is the address the notification's links start with.
ALERT_WEBHOOK_TIMEOUT_S = env_int(
    "ALERT_WEBHOOK_TIMEOUT_S", 5, min_value=1, max_value=60
)
# Webhooks go to public addresses only: loopback, private, link-local (a cloud's
# metadata service) and the like are refused, else any user could probe the
# server's own network. A self-hosted server whose receiver is on its LAN sets this.
ALERT_WEBHOOK_ALLOW_PRIVATE = env_bool("ALERT_WEBHOOK_ALLOW_PRIVATE", False)
# A receiver that is down (or answers 5xx, 408, 429) is tried again after each of
# these delays in seconds, then the notification is marked failed.
try:
    ALERT_WEBHOOK_RETRY_S = [
        float(x)
        for x in env_list("ALERT_WEBHOOK_RETRY_S", ["10", "60", "300", "1800", "7200"])
    ]
except ValueError:
    ALERT_WEBHOOK_RETRY_S = [-1.0]
if len(ALERT_WEBHOOK_RETRY_S) > 20 or not all(
    0 <= x <= 86400 for x in ALERT_WEBHOOK_RETRY_S
):
    raise ImproperlyConfigured(
        "ALERT_WEBHOOK_RETRY_S: comma-separated seconds, at most 20 delays, each "
        "from 0 to 86400"
    )
DASHBOARD_URL = (env_str("DASHBOARD_URL", "") or "http://127.0.0.1:8000").rstrip("/")
# An external run (reporting over HTTP) that sends nothing for this long shows as lost.
EXTERNAL_RUN_TIMEOUT = env_int("EXTERNAL_RUN_TIMEOUT", 600, min_value=5)

# --- input limits: what one request, event or upload may hold -------------------------
from dashboard.site.settings_limits import *  # noqa: E402,F403


# --- model and data roots ------------------------------------------------------------
# What a run on the platform may read (dashboard.library.roots): ":"-separated directories.
# Every path in a config resolves, after symlinks, inside one of them; a relative path
# resolves against them in order, the first holding it. The trainer CLI is not restricted by these.
def _roots(name: str, default: Path) -> list[Path]:
    raw = env_str(name)
    if raw is None:
        # A read-only var dir: the check then refuses every path.
        with contextlib.suppress(OSError):
            default.mkdir(parents=True, exist_ok=True)
        return [default.absolute()]
    roots = [Path(p) for p in raw.split(":") if p.strip()]
    if not roots or not all(p.is_absolute() for p in roots):
        raise ImproperlyConfigured(f"{name} must be ':'-separated absolute directories")
    return roots


MODEL_ROOTS = _roots("MODEL_ROOTS", VAR_DIR / "models")
DATA_ROOTS = _roots("DATA_ROOTS", VAR_DIR / "data")
# The new-run form's model picker rescans the model roots at most this often.
MODEL_SCAN_SECONDS = env_int("MODEL_SCAN_SECONDS", 30, min_value=0)

# --- auth, security -------------------------------------------------------------------
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "/"  # home: it leads to the run training now
LOGOUT_REDIRECT_URL = "login"
AUTH_PASSWORD_VALIDATORS = [
    {
        "NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"
    },
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
if TESTING:  # fixtures create users by the hundred; PBKDF2 would dominate the suite
    PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_SAMESITE = "Lax"
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"

_secure_default = not EMBEDDED and not DEBUG
SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", _secure_default)
CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE", _secure_default)
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", _secure_default and not TESTING)
SECURE_HSTS_SECONDS = env_int(
    "SECURE_HSTS_SECONDS", 31536000 if _secure_default else 0, min_value=0
)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool(
    "SECURE_HSTS_INCLUDE_SUBDOMAINS", _secure_default
)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", _secure_default)
if env_bool("SECURE_PROXY_SSL_HEADER", False):  # behind a TLS-terminating proxy
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_REDIRECT_EXEMPT = [r"^healthz$"]

# --- static files, i18n, logging ------------------------------------------------------
STATIC_URL = "/static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STATICFILES_DIRS = [BASE_DIR / "static"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
# Serve straight from the app/static dirs when nobody ran collectstatic (embedded, tests).
_collected = STATIC_ROOT.is_dir() and any(STATIC_ROOT.iterdir())
WHITENOISE_USE_FINDERS = EMBEDDED or DEBUG or TESTING or not _collected
if WHITENOISE_USE_FINDERS:
    STATIC_ROOT.mkdir(exist_ok=True)  # WhiteNoise warns about a missing STATIC_ROOT

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

LOG_LEVEL = env_str("LOG_LEVEL", "INFO")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": "WARNING"},
    "loggers": {"dashboard": {"level": LOG_LEVEL, "propagate": True}},
}
