"""dshloop settings: everything that varies between machines comes from the environment.

Small typed helpers (dshloop.env) read each variable and fail loudly (ImproperlyConfigured) on a
bad value, so a typo in production is a start-up error, not a silent default. Importing settings
writes nothing: files under var/ are made by `make run` (Makefile) or on first use.
"""

from __future__ import annotations

import os
import re
import secrets
import tempfile
import warnings
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from dshloop.env import (
    env_bool,
    env_choice,
    env_int,
    env_int_list,
    env_int_over,
    env_list,
    env_listed,
    env_origins,
    env_proxy_ssl_header,
    env_str,
    env_time_zone,
    read_key_file,
)

BASE_DIR = Path(__file__).resolve().parent.parent


def default_var_dir() -> Path:
    """Where the embedded mode keeps its files: var/ in a clone (beside manage.py), and for an
    installed `dshloop` (BASE_DIR is then site-packages) the user's data directory."""
    if (BASE_DIR / "manage.py").is_file():
        return BASE_DIR / "var"
    return Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share") / "dshloop"


VAR_DIR = Path(os.environ.get("DSHLOOP_VAR_DIR") or default_var_dir())


DEBUG = env_bool("DJANGO_DEBUG", False)
SECRET_KEY = env_str("DJANGO_SECRET_KEY")  # without it: the embedded mode's key file, see DATABASES
SECRET_KEY_FILE = VAR_DIR / "secret_key"  # written once by `make run`, only read here

ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]", "testserver"])
# Behind a TLS-terminating proxy (docs/production.md): the origins the panel's forms
# are posted from, the header that tells Django a request came over HTTPS, and cookies sent over
# HTTPS only. The cookie switches keep Django's names (those `manage.py check --deploy` reports),
# one each as in Django, and are off by default as in Django: `make run` serves plain HTTP, where a
# client that honours Secure never sends the cookie back, so signing in would fail.
CSRF_TRUSTED_ORIGINS = env_origins("DJANGO_CSRF_TRUSTED_ORIGINS")
SECURE_PROXY_SSL_HEADER = env_proxy_ssl_header("DJANGO_SECURE_PROXY_SSL_HEADER")
SESSION_COOKIE_SECURE = env_bool("DJANGO_SESSION_COOKIE_SECURE", False)
CSRF_COOKIE_SECURE = env_bool("DJANGO_CSRF_COOKIE_SECURE", False)

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "django_q",
    "tokens",
    "sessions_app",
    "loops",
    "scheduler",
    "tools",
    "panel",
    "dshloop",
]
# manage.py sets DSHLOOP_SCHEDULER_PROCESS for `runloops` only. The scheduler serves no
# page or API call and touches no user, so it loads only the task queue and the domain apps (none
# of whose models refers to the others). What the others import is memory in every one of its
# processes (a fork inherits it, RSS counts it in each): the admin's autodiscovery alone imports
# every admin.py and through them ninja, pydantic and httpx (docs/BENCHMARKS.md counts a process's memory).
SCHEDULER_PROCESS = env_bool("DSHLOOP_SCHEDULER_PROCESS")
if SCHEDULER_PROCESS:
    INSTALLED_APPS = ["django_q", "tokens", "sessions_app", "loops", "scheduler"]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "dshloop.middleware.ApiMethodNotAllowed",
    # Last, so the first to see a view's exception: 503 when the database is away, else a logged 500.
    "dshloop.middleware.ServerErrors",
]

ROOT_URLCONF = "dshloop.urls"
WSGI_APPLICATION = "dshloop.wsgi.application"

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


def database_from_url(url: str) -> dj_database_url.DBConfig:
    try:
        config = dj_database_url.parse(url)
    except (ValueError, KeyError) as exc:
        raise ImproperlyConfigured(f"DATABASE_URL is not a database URL: {exc}") from exc
    if config["ENGINE"] == "django.db.backends.sqlite3":
        # FIELD-NOTES: WAL + IMMEDIATE transactions remove "database is locked" under the
        # scheduler's concurrent writers; the busy timeout waits instead of failing.
        config["OPTIONS"] = {
            "transaction_mode": "IMMEDIATE",
            "timeout": 20,
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        }
        # A file (not :memory:) so that scheduler processes started by tests share it; one per
        # test run, so that concurrent runs do not collide. In the temporary directory, which
        # exists on a fresh clone (settings create no var/).
        config["TEST"] = {"NAME": str(Path(tempfile.gettempdir()) / f"dshloop-test-{os.getpid()}.sqlite3")}
    else:
        # FIELD-NOTES: django-q2 closes "old" connections on every broker step; persistent,
        # health-checked connections avoid a new connection per poll.
        # (persistent without an age limit: an idle scheduler then opens no connection a minute;
        # the health check replaces one that broke, e.g. across a server restart).
        config["CONN_MAX_AGE"] = None
        config["CONN_HEALTH_CHECKS"] = True
        config["TEST"] = {"NAME": f"test_dshloop_{os.getpid()}"}  # concurrent test runs do not collide
    return config


DATABASES = {
    "default": database_from_url(env_str("DATABASE_URL", f"sqlite:///{VAR_DIR / 'dshloop.sqlite3'}")),
}
if not SECRET_KEY:
    if DATABASES["default"]["ENGINE"] != "django.db.backends.sqlite3":
        raise ImproperlyConfigured(
            "DJANGO_SECRET_KEY must be set when DATABASE_URL is not SQLite: every process on a shared "
            "database (API servers and schedulers, on any machine) must sign sign-in sessions and CSRF "
            "tokens with the same key, or users are signed out and forms refused between them. Make one "
            "with: python -c 'import secrets; print(secrets.token_urlsafe(50))'"
        )
    # Zero set-up for the embedded mode: `make run` writes var/secret_key once, so sign-ins survive
    # restarts. Until it exists (tests, a manage.py command before the first `make run`), a key
    # for this process alone.
    SECRET_KEY = read_key_file(SECRET_KEY_FILE) or secrets.token_urlsafe(50)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = env_time_zone("TIME_ZONE", "UTC")  # the host time zone for cron loops without tz
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"  # collectstatic target; whitenoise serves from the finders too
STATICFILES_DIRS = [BASE_DIR / "static"] if (BASE_DIR / "static").is_dir() else []
# Serve straight from the app folders: `make run` works without a collectstatic step.
WHITENOISE_USE_FINDERS = True
# Until collectstatic makes STATIC_ROOT, whitenoise warns "No directory at: …" on start-up; the
# finders serve every file meanwhile, so that warning (for this directory only) says nothing.
warnings.filterwarnings("ignore", message=re.escape(f"No directory at: {os.path.abspath(STATIC_ROOT)}"))

LOGIN_URL = "/admin/login/"

# Agent-session host (contract §1, §5, §6).
DSHLOOP_HOST = env_choice("DSHLOOP_HOST", "local", {"local", "http", "dsh"})
DSHLOOP_HOST_URL = env_str("DSHLOOP_HOST_URL")
DSHLOOP_HOST_TOKEN = env_str("DSHLOOP_HOST_TOKEN")
if DSHLOOP_HOST == "http" and not DSHLOOP_HOST_URL:
    raise ImproperlyConfigured("DSHLOOP_HOST=http needs DSHLOOP_HOST_URL.")
# A real DeepSeek Harness host (contract §11): its HTTP API, and the workspace for `new` sessions.
DSHLOOP_DSH_URL = env_str("DSHLOOP_DSH_URL", "http://127.0.0.1:3080")
DSHLOOP_DSH_CWD = env_str("DSHLOOP_DSH_CWD")
if DSHLOOP_DSH_CWD and not os.path.isabs(DSHLOOP_DSH_CWD):
    raise ImproperlyConfigured(
        f"DSHLOOP_DSH_CWD must be an absolute path (DSH refuses others), not {DSHLOOP_DSH_CWD!r}."
    )
DSHLOOP_HOST_TIMEOUT_SECONDS = env_int("DSHLOOP_HOST_TIMEOUT_SECONDS", 10)
# A request body must arrive whole within this many seconds, or 408 (dshloop.request_bodies):
# a client that announces a body and sends none must not hold a server thread.
DSHLOOP_REQUEST_BODY_TIMEOUT_SECONDS = env_int("DSHLOOP_REQUEST_BODY_TIMEOUT_SECONDS", 15)
# A client that reads nothing of a response for this many seconds is dropped (dshloop.slow_readers):
# it must not hold the server thread that produces the response.
DSHLOOP_RESPONSE_STALL_SECONDS = env_int("DSHLOOP_RESPONSE_STALL_SECONDS", 30)
# The global interface session (`self`, the panel's creator). DSH has none of its own, so on DSH it
# defaults to one stable session that `manage.py bootstrap` makes in DSH once.
DSH_GLOBAL_SESSION_ID = "dshloop-global"
DSHLOOP_GLOBAL_SESSION_ID = env_str("DSHLOOP_GLOBAL_SESSION_ID", DSH_GLOBAL_SESSION_ID if DSHLOOP_HOST == "dsh" else "")
DSHLOOP_DEFAULT_PRESET = env_str("DSHLOOP_DEFAULT_PRESET", "default")
DSHLOOP_DEFAULT_MODEL = env_str("DSHLOOP_DEFAULT_MODEL", "default")
# Contract §3 quota_exceeded: at most this many active loops per target session, and per
# creating session for "new" and "self" loops (loops.services.check_loop_quota).
DSHLOOP_MAX_ACTIVE_LOOPS_PER_SESSION = env_int("DSHLOOP_MAX_ACTIVE_LOOPS_PER_SESSION", 1000)
# Contract §14 interval_too_short: an every/cron loop whose every run starts a fresh agent (`new`)
# fires at most this often, so an unattended loop cannot start agents back to back; 0: no floor.
DSHLOOP_MIN_NEW_INTERVAL_SECONDS = env_int("DSHLOOP_MIN_NEW_INTERVAL_SECONDS", 300, minimum=0)
# Contract §14: a `new` loop an agent creates (the tools: REST, MCP, the DSH plugin) starts paused,
# "awaiting approval", until an operator resumes it. Off by default: inside DSH the plugin already
# asks the person before an agent creates a `new` loop, and turning it on holds back every agent's
# `new` loops until someone looks at the panel.
DSHLOOP_APPROVE_AGENT_NEW_LOOPS = env_bool("DSHLOOP_APPROVE_AGENT_NEW_LOOPS", False)
# Contract §14: whether what DSH Web's Loops panel asks is taken as a person's. DSH's plugin channel
# answers any local process, an agent's bash included, so by default it is not: with the approval
# on, its `new` loops (made or widened there) await approval like an agent's, and it may not approve
# or run one that does (dshloop's own panel may). Set it only where no agent can reach DSH's port.
DSHLOOP_TRUST_DSH_WEB = env_bool("DSHLOOP_TRUST_DSH_WEB", False)
# Contract §15: whether a session dshloop made for a `new` run may create and delete loops (the
# tools refuse it with 403 forbidden, and GET /api/tools leaves them out for it). Off by default:
# an unattended run must not schedule more unattended work, as dsh-automation refuses recursion.
DSHLOOP_FRESH_RUNS_MAY_CREATE_LOOPS = env_bool("DSHLOOP_FRESH_RUNS_MAY_CREATE_LOOPS", False)
# Whether the session of a `new` run whose turn has ended is archived in a host that archives
# (DSH: out of DSH Web's session list, its log kept, the run still naming it), as dsh-automation's
# archiveRunSessions. Off by default: DSH 0.1.0-rc.8 cannot unarchive, and DSH Web will not open an
# archived session, so a run's "Open session" would lead nowhere.
DSHLOOP_ARCHIVE_FRESH_RUNS = env_bool("DSHLOOP_ARCHIVE_FRESH_RUNS", False)
# Contract §14: the tools (by name) a session dshloop made for a `new` run may call beyond the plugin's
# small built-in set (dsh-plugin/src/boundary.ts, docs/dsh.md): nobody watches such a run, so nested
# agents, background jobs, questions and other plugins' tools are refused unless named here. Sent
# with each delivery into such a session; an operator's setting, never a loop's.
DSHLOOP_FRESH_RUN_TOOLS = env_list("DSHLOOP_FRESH_RUN_TOOLS", [])
if bad_tools := [
    name for name in DSHLOOP_FRESH_RUN_TOOLS if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.:-]{0,127}", name)
]:
    raise ImproperlyConfigured(
        f"DSHLOOP_FRESH_RUN_TOOLS must list tool names separated by commas (letters, digits, _ . : -), "
        f"not {', '.join(map(repr, bad_tools))}."
    )
# Contract §14, §15: the host permission presets a `new` loop may carry (DSH rc.8's table without its
# unconfined `danger-full-access`, which an operator may add; a deployment that patches DSH's table
# with more lists them here too), and the one a new loop gets unless an operator picks another: the
# most restrictive that still lets a run read its workspace.
DSHLOOP_PERMISSION_PRESETS = env_list("DSHLOOP_PERMISSION_PRESETS", ["read-only", "workspace-write"])
DSHLOOP_DEFAULT_PERMISSION_PRESET = env_listed(
    "DSHLOOP_DEFAULT_PERMISSION_PRESET",
    "read-only",
    DSHLOOP_PERMISSION_PRESETS,
    listed_in="DSHLOOP_PERMISSION_PRESETS",
)
# Contract §14: a `new` run whose turn is still going this long after its delivery is cancelled in
# the host and recorded failed ("timed out after …"); a run into an existing session is only
# recorded as having no outcome within it (it is a person's conversation).
DSHLOOP_RUN_TIMEOUT_SECONDS = env_int("DSHLOOP_RUN_TIMEOUT_SECONDS", 3600, minimum=1)
# Contract §14: at most this many fresh (`new`) agents running at once across the profile; an
# occurrence over it waits for a slot, in order (every scheduler counts the same runs).
DSHLOOP_MAX_CONCURRENT_NEW_RUNS = env_int("DSHLOOP_MAX_CONCURRENT_NEW_RUNS", 4, minimum=1)
# How often a scheduler asks a host that reports turn ends (dsh) how the delivered turns ended, and
# enforces the run timeout: a slot for a fresh agent frees at most this long after its turn ended.
DSHLOOP_OUTCOME_POLL_SECONDS = env_int("DSHLOOP_OUTCOME_POLL_SECONDS", 5)
# How long a claimed or started delivery may stay open before another scheduler re-drives it
# (a crashed process's runs wait this long). On a remote host it must outlast a delivery's worst
# case, three host calls of DSHLOOP_HOST_TIMEOUT_SECONDS each, or a slow delivery still under way
# would be sent again; the embedded host makes no calls (its row locks hold the runs), so it has no floor.
_DELIVERY_WORST_CASE = 3 * DSHLOOP_HOST_TIMEOUT_SECONDS if DSHLOOP_HOST != "local" else 0
DSHLOOP_RUN_LEASE_SECONDS = env_int_over(
    "DSHLOOP_RUN_LEASE_SECONDS",
    45,
    floor=_DELIVERY_WORST_CASE,
    why=f"three host calls of DSHLOOP_HOST_TIMEOUT_SECONDS={DSHLOOP_HOST_TIMEOUT_SECONDS} each, a delivery's worst "
    f"case on DSHLOOP_HOST={DSHLOOP_HOST}: a shorter lease would re-drive a delivery still under way",
)

# A run's whole life (contract §10).
# Consecutive failures of a recurring loop delay its next claim by these (the last repeats), and
# after DSHLOOP_AUTO_PAUSE_AFTER in a row pause it ("auto: <error>"); 0 never pauses.
DSHLOOP_FAILURE_BACKOFF_SECONDS = env_int_list("DSHLOOP_FAILURE_BACKOFF_SECONDS", [30, 60, 300, 900, 3600])
DSHLOOP_AUTO_PAUSE_AFTER = env_int("DSHLOOP_AUTO_PAUSE_AFTER", 5, minimum=0)
# contract §16: failure notices and the operators' failure webhook (scheduler.failure_notices,
# scheduler.failure_webhook). A notice goes into the loop's creator session (else `self`) once per
# failure episode: a loop's auto-pause, a failed or timed-out run of a `new` loop.
DSHLOOP_FAILURE_NOTICES = env_bool("DSHLOOP_FAILURE_NOTICES", True)
# How often each `runloops` looks for notices owed: a look is one read (an idle scheduler's cost).
DSHLOOP_FAILURE_NOTICE_POLL_SECONDS = env_int("DSHLOOP_FAILURE_NOTICE_POLL_SECONDS", 60)
DSHLOOP_FAILURE_WEBHOOK_URL = env_str("DSHLOOP_FAILURE_WEBHOOK_URL")
DSHLOOP_FAILURE_WEBHOOK_SECRET = env_str("DSHLOOP_FAILURE_WEBHOOK_SECRET")
if DSHLOOP_FAILURE_WEBHOOK_URL and not DSHLOOP_FAILURE_WEBHOOK_URL.startswith(("http://", "https://")):
    raise ImproperlyConfigured("DSHLOOP_FAILURE_WEBHOOK_URL must be an http:// or https:// URL.")
if DSHLOOP_FAILURE_WEBHOOK_URL and not DSHLOOP_FAILURE_WEBHOOK_SECRET:
    # An unsigned event cannot be told from a forged one: the receiver could not trust it.
    raise ImproperlyConfigured("DSHLOOP_FAILURE_WEBHOOK_URL needs DSHLOOP_FAILURE_WEBHOOK_SECRET (it signs each POST).")
# An event the receiver does not take (an error, a non-2xx answer) is retried with backoff for this
# long after the failure, then given up (logged and counted); each POST waits at most the timeout.
DSHLOOP_FAILURE_WEBHOOK_RETRY_SECONDS = env_int("DSHLOOP_FAILURE_WEBHOOK_RETRY_SECONDS", 900)
DSHLOOP_FAILURE_WEBHOOK_TIMEOUT_SECONDS = env_int("DSHLOOP_FAILURE_WEBHOOK_TIMEOUT_SECONDS", 5)
# Unset: the spec's one catch-up after downtime, however late. Set: a catch-up later than this is
# recorded as a skipped run instead of being delivered.
DSHLOOP_MISFIRE_GRACE_SECONDS = env_int("DSHLOOP_MISFIRE_GRACE_SECONDS", 0) or None
# contract §16: each cron loop's deliveries come a stable per-loop delay in [0, this) after their
# instants (timing.jitter), so that loops sharing a time do not all fall due in one second. 0: none.
# At most an hour: a spread wider than that is a different schedule, not a jitter.
DSHLOOP_CRON_JITTER_SECONDS = env_int("DSHLOOP_CRON_JITTER_SECONDS", 0, minimum=0)
if DSHLOOP_CRON_JITTER_SECONDS > 3600:
    raise ImproperlyConfigured(f"DSHLOOP_CRON_JITTER_SECONDS must be at most 3600, not {DSHLOOP_CRON_JITTER_SECONDS}.")
# Retention: each loop keeps its newest terminal runs; embedded inbox messages expire. Open runs
# and the audit trail are never pruned.
DSHLOOP_RUN_HISTORY_LIMIT = env_int("DSHLOOP_RUN_HISTORY_LIMIT", 200)
DSHLOOP_INBOX_RETENTION_DAYS = env_int("DSHLOOP_INBOX_RETENTION_DAYS", 30)
DSHLOOP_PRUNE_INTERVAL_SECONDS = env_int("DSHLOOP_PRUNE_INTERVAL_SECONDS", 3600)  # runloops: at start, then so often

# The task django-q2 runs for a batch of claimed runs. The project names it because the project
# assembles the layers: loops.queue enqueues it but sits below the scheduler that runs it.
DSHLOOP_DELIVER_TASK = "scheduler.tasks.deliver_runs"

# django-q2: the ORM broker on the same alias as the loops, so an enqueue commits in the
# same transaction as its claim (django-q2 #293). timeout < retry (a task must never be
# handed out again while it still runs). We keep our own run records, so no results.
Q_CLUSTER = {
    "name": "dshloop",
    "orm": "default",
    # The ORM broker, woken by NOTIFY on PostgreSQL instead of polling (scheduler/broker.py).
    "broker_class": "scheduler.broker.NotifyingORM",
    "queue_limit": 4,  # tasks a cluster holds ahead of its workers; the rest stay for other clusters
    "workers": 2,
    "timeout": 60,
    "retry": 120,
    "max_attempts": 1,
    "save_limit": -1,
    "ack_failures": True,
    "catch_up": False,
    "scheduler": False,  # loops have their own clock; django-q2's Schedule table is unused
    "poll": 0.2,
    "bulk": 2,  # tasks taken per look at the queue: with 250 runs per task, enough
    "label": "Task queue",
}

# "human" lines for a terminal (the default), or "json": one object per line for a log
# pipeline, an occurrence's line with its loop_id, run_id, outcome … as keys (core/logformat.py).
# The one console handler uses it, so django-q2's lines are in the same format as ours.
DSHLOOP_LOG_FORMAT = env_choice("DSHLOOP_LOG_FORMAT", "human", {"human", "json"})
# `serve`'s request log, a line per HTTP request: off by default, because DSH Web's panels poll
# every few seconds and the lines would push start-up messages (the URLs, the admin password) out
# of the terminal; warnings and errors are logged either way.
DSHLOOP_ACCESS_LOG = env_bool("DSHLOOP_ACCESS_LOG", False)
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "human": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"},
        "json": {"class": "core.logformat.JsonFormatter"},
    },
    "filters": {"uncaught_only": {"()": "core.logformat.UncaughtOnly"}},
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": DSHLOOP_LOG_FORMAT},
        "console_uncaught": {
            "class": "logging.StreamHandler",
            "formatter": DSHLOOP_LOG_FORMAT,
            "filters": ["uncaught_only"],
        },
    },
    "loggers": {
        "dshloop": {"handlers": ["console"], "level": "INFO", "propagate": False},
        # An exception Django caught (one raised outside any view, or in a view under DEBUG) is
        # logged here with its traceback. Django's own configuration sends this logger to the
        # console only under DEBUG and otherwise to mail_admins, which without ADMINS sends nothing:
        # so with DJANGO_DEBUG unset a 500 would leave no line in the log without this entry.
        "django.request": {"handlers": ["console_uncaught"], "level": "ERROR", "propagate": False},
        # The MCP SDK's own errors (a crashed request inside its transport), in the same format.
        "mcp": {"handlers": ["console"], "level": "WARNING", "propagate": False},
        # django-q2 logs as "django-q" (django_q/conf.py), not "django_q"; without this entry django-q2
        # adds its own handler at INFO, two lines per task in its own format.
        "django-q": {"handlers": ["console"], "level": "WARNING", "propagate": False},
    },
}
