"""What the harness process itself needs: Django set up on a bench database, and a timed log line."""

from __future__ import annotations

import os
import secrets
import time


def setup_django(database: str | None = None) -> None:
    """The harness is a dshloop process on the bench database: it uses the product's own
    notify_clocks, models (to capture queries) and API (for the latency benchmarks)."""
    from bench import db

    os.environ["DJANGO_SETTINGS_MODULE"] = "dshloop.settings"
    os.environ["DATABASE_URL"] = db.url(database or db.DSHLOOP_DB)
    os.environ.setdefault("DSHLOOP_HOST", "local")
    # Settings refuse PostgreSQL without a secret key; every process of the run (both systems'
    # schedulers and migrations, bench.systems) inherits this one from os.environ.
    os.environ.setdefault("DJANGO_SECRET_KEY", "dshloop-bench-" + secrets.token_urlsafe(32))
    import django

    django.setup()


def log(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {message}", flush=True)
