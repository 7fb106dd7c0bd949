#!/usr/bin/env python
"""Django's command-line utility for dshloop."""

import os
import sys
from pathlib import Path

PRIVATE_FILE = 0o600
PRIVATE_DIRECTORY = 0o700


def prepare_database_files() -> None:
    """The embedded SQLite database lives under var/, which a fresh clone lacks. Importing settings
    writes nothing (issue 12), so the command line makes the directory before a command opens it.

    The database holds staff sign-in sessions and API token hashes: it is made owner-only before
    SQLite first opens it (SQLite gives its -wal and -shm files the database file's mode), and a
    database made readable by an older version is made private again."""
    from django.conf import settings

    try:
        database = settings.DATABASES["default"]
    except Exception:  # noqa: BLE001 - bad settings: the command below reports them properly
        return
    if database["ENGINE"] != "django.db.backends.sqlite3" or str(database["NAME"]) == ":memory:":
        return
    path = Path(database["NAME"])
    path.parent.mkdir(mode=PRIVATE_DIRECTORY, parents=True, exist_ok=True)
    if path.parent == Path(settings.VAR_DIR):  # ours alone; never chmod a shared directory such as /tmp
        path.parent.chmod(PRIVATE_DIRECTORY)
    try:
        os.close(
            os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, PRIVATE_FILE)
        )  # an empty file is an empty database
    except FileExistsError:
        pass
    for name in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
        try:
            if name.stat().st_mode & 0o077:
                name.chmod(PRIVATE_FILE)
        except FileNotFoundError:
            pass


# `runloops` loads only the apps the scheduler runs (dshloop.settings SCHEDULER_PROCESS, issue 17).
SCHEDULER_PROCESS_ENV = "DSHLOOP_SCHEDULER_PROCESS"


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dshloop.settings")
    if sys.argv[1:2] == ["runloops"]:
        os.environ[SCHEDULER_PROCESS_ENV] = "1"  # before anything below imports the settings
    from django.core.management import execute_from_command_line

    prepare_database_files()
    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        # Ctrl-C while Django starts, before a command installs its own stop handling (serve's and
        # runloops' handlers come later): a person stopping us, not a crash, so no traceback.
        sys.exit(130)
