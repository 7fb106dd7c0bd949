"""Settings for the PostgreSQL pass of the suite: the project settings on DSHLOOP_TEST_DATABASE_URL.

Without that variable the suite is reported as skipped (see tests/conftest.py); the SQLite
URL below only lets the settings import so that pytest can say why.
"""

import os
import secrets

os.environ["DATABASE_URL"] = os.environ.get("DSHLOOP_TEST_DATABASE_URL") or "sqlite:///:memory:"
# Settings refuse a non-SQLite database without DJANGO_SECRET_KEY; one key for this test run, which
# the processes the tests start are given too (tests/processes.py and the like).
os.environ.setdefault("DJANGO_SECRET_KEY", "dshloop-tests-" + secrets.token_urlsafe(32))

from dshloop.settings import *  # noqa: F403

POSTGRES_PASS = True
