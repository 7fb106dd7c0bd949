"""dshloop settings: everything that varies between machines comes from the environment.

Small typed helpers read each variable and fail loudly (ImproperlyConfigured) on a bad
value, so a typo in production is a start-up error, not a silent default.
"""

from __future__ import annotations

import os
import zoneinfo
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("DSHLOOP_VAR_DIR", BASE_DIR / "var"))


def env_str(name: str, default: str = "") -> str:
    return os.environ.get(name, default).strip()


def env_bool(name: str, default: bool = False) -> bool:
    raw = env_str(name)
    if not raw:
        return default
    if raw.lower() in {"1", "true", "yes", "on"}:
        return True
    if raw.lower() in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean (true/false), not {raw!r}.")


def env_int(name: str, default: int, *, minimum: int = 1) -> int:
    raw = env_str(name)
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be an integer, not {raw!r}.") from None
    if value < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, not {value}.")
    return value


def env_list(name: str, default: list[str]) -> list[str]:
    raw = env_str(name)
    return [item.strip() for item in raw.split(",") if item.strip()] if raw else default


def env_choice(name: str, default: str, choices: set[str]) -> str:
    value = env_str(name, default)
    if value not in choices:
        raise ImproperlyConfigured(f"{name} must be one of {sorted(choices)}, not {value!r}.")
    return value


def env_time_zone(name: str, default: str) -> str:
    value = env_str(name, default)
    if value not in zoneinfo.available_timezones():
        raise ImproperlyConfigured(f"{name} must be an IANA time-zone name, not {value!r}.")
    return value


DEBUG = env_bool("DJANGO_DEBUG", False)
SECRET_KEY = env_str("DJANGO_SECRET_KEY")
if not SECRET_KEY:
    # Zero set-up for the embedded mode: a per-checkout key kept under var/.
    key_file = VAR_DIR / "secret_key"
    if not key_file.exists():
        import secrets

        VAR_DIR.mkdir(parents=True, exist_ok=True)
        key_file.write_text(secrets.token_urlsafe(50))
    SECRET_KEY = key_file.read_text().strip()

ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]", "testserver"])

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
]

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


def database_from_url(url: str) -> dict:
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
        # test run, so that concurrent runs on one checkout do not collide.
        config["TEST"] = {"NAME": str(VAR_DIR / f"test-{os.getpid()}.sqlite3")}
    else:
        # FIELD-NOTES: django-q2 closes "old" connections on every broker step; persistent,
        # health-checked connections avoid a new connection per poll.
        # (persistent without an age limit: an idle scheduler then opens no connection a minute;
        # the health check replaces one that broke, e.g. across a server restart).
        config["CONN_MAX_AGE"] = None
        config["CONN_HEALTH_CHECKS"] = True
        config["TEST"] = {"NAME": f"test_dshloop_{os.getpid()}"}  # concurrent test runs do not collide
    return config


(VAR_DIR / "static").mkdir(parents=True, exist_ok=True)
DATABASES = {
    "default": database_from_url(env_str("DATABASE_URL", f"sqlite:///{VAR_DIR / 'dshloop.sqlite3'}")),
}
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

LOGIN_URL = "/admin/login/"

# Agent-session host (contract §1, §5, §6).
DSHLOOP_HOST = env_choice("DSHLOOP_HOST", "local", {"local", "http"})
DSHLOOP_HOST_URL = env_str("DSHLOOP_HOST_URL")
DSHLOOP_HOST_TOKEN = env_str("DSHLOOP_HOST_TOKEN")
if DSHLOOP_HOST == "http" and not DSHLOOP_HOST_URL:
    raise ImproperlyConfigured("DSHLOOP_HOST=http needs DSHLOOP_HOST_URL.")
DSHLOOP_HOST_TIMEOUT_SECONDS = env_int("DSHLOOP_HOST_TIMEOUT_SECONDS", 10)
DSHLOOP_GLOBAL_SESSION_ID = env_str("DSHLOOP_GLOBAL_SESSION_ID")
DSHLOOP_DEFAULT_PRESET = env_str("DSHLOOP_DEFAULT_PRESET", "default")
DSHLOOP_DEFAULT_MODEL = env_str("DSHLOOP_DEFAULT_MODEL", "default")
# How long a claimed or started delivery may stay open before another scheduler re-drives it
# (a crashed process's runs wait this long). Keep it above a delivery's worst case: three host
# calls of DSHLOOP_HOST_TIMEOUT_SECONDS each.
DSHLOOP_RUN_LEASE_SECONDS = env_int("DSHLOOP_RUN_LEASE_SECONDS", 45)

# django-q2: the ORM broker on the same alias as the loops, so an enqueue commits in the
# same transaction as its claim (django-q2 #293). timeout < retry (a task must never be
# handed out again while it still runs). We keep our own run records, so no results.
Q_CLUSTER = {
    "name": "dshloop",
    "orm": "default",
    # The ORM broker, woken by NOTIFY on PostgreSQL instead of polling (loops/broker.py).
    "broker_class": "loops.broker.NotifyingORM",
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

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "loggers": {
        "dshloop": {"handlers": ["console"], "level": "INFO", "propagate": False},
        "django_q": {"handlers": ["console"], "level": "WARNING", "propagate": False},
    },
}
