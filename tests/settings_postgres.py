"""Settings for the PostgreSQL pass of the suite: the project settings on DSHLOOP_TEST_DATABASE_URL.

Without that variable the suite is reported as skipped (see tests/conftest.py); the SQLite
URL below only lets the settings import so that pytest can say why.
"""

import os

os.environ["DATABASE_URL"] = os.environ.get("DSHLOOP_TEST_DATABASE_URL") or "sqlite:///:memory:"

from dshloop.settings import *  # noqa: E402,F403

POSTGRES_PASS = True
