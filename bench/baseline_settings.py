"""The baseline: a minimal django-q2 project that runs periodic work the standard way, with
django-q2's own `Schedule` model and `manage.py qcluster`.

It is configured at its best, so that the comparison is with django-q2 tuned,
not with its defaults:
- the ORM broker on PostgreSQL, like dshloop (no extra service);
- persistent, health-checked connections (CONN_MAX_AGE=60): django-q2 closes "old" connections
  on every broker step, and with Django's default of 0 that is a new connection per poll;
- catch_up=False: a late schedule runs once, not once per missed interval;
- save_limit=-1: the bench task records its own run time, so storing successful results would be
  pure cost for the monitor;
- the same cluster knobs as dshloop's Q_CLUSTER (workers, queue_limit, bulk, poll, timeout,
  retry), so both clusters have the same worker count.

The database comes from BENCH_BASELINE_DATABASE_URL (bench.systems.Baseline sets it).
"""

from __future__ import annotations

import os

import dj_database_url

from dshloop.settings import Q_CLUSTER as DSHLOOP_Q_CLUSTER

SECRET_KEY = "bench-baseline-not-secret"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
ALLOWED_HOSTS: list[str] = []
INSTALLED_APPS = ["django_q"]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

DATABASES = {
    "default": {
        **dj_database_url.parse(os.environ["BENCH_BASELINE_DATABASE_URL"]),
        "CONN_MAX_AGE": 60,
        "CONN_HEALTH_CHECKS": True,
    }
}

_SAME_AS_DSHLOOP = ("workers", "queue_limit", "bulk", "poll", "timeout", "retry", "max_attempts")

Q_CLUSTER = {
    "name": "baseline",
    "orm": "default",  # django-q2's stock ORM broker (dshloop's adds LISTEN/NOTIFY wake-ups)
    **{key: DSHLOOP_Q_CLUSTER[key] for key in _SAME_AS_DSHLOOP},
    "catch_up": False,
    "save_limit": -1,
    "ack_failures": True,
    "scheduler": True,  # the Schedule table is the point of the baseline
    # django-q2's default; bench.systems.Baseline.ready waits for its "Q Cluster … running." line.
    "log_level": "INFO",
}
