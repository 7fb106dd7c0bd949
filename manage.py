#!/usr/bin/env python
"""Django's command-line utility for dshloop."""

import os
import sys
from pathlib import Path


def ensure_database_directory() -> None:
    """The embedded SQLite database lives under var/, which a fresh clone lacks. Importing settings
    writes nothing (issue 12), so the command line makes the directory before a command opens it."""
    from django.conf import settings

    try:
        database = settings.DATABASES["default"]
    except Exception:  # noqa: BLE001 - bad settings: the command below reports them properly
        return
    if database["ENGINE"] == "django.db.backends.sqlite3" and str(database["NAME"]) != ":memory:":
        Path(database["NAME"]).parent.mkdir(parents=True, exist_ok=True)


# `runloops` loads only the apps the scheduler runs (dshloop.settings SCHEDULER_PROCESS, issue 17).
SCHEDULER_PROCESS_ENV = "DSHLOOP_SCHEDULER_PROCESS"


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dshloop.settings")
    if sys.argv[1:2] == ["runloops"]:
        os.environ[SCHEDULER_PROCESS_ENV] = "1"  # before anything below imports the settings
    from django.core.management import execute_from_command_line

    ensure_database_directory()
    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
