"""The `dshloop` command (and manage.py, which calls it): Django's command line for this project.

Installed with the package (`pip install dshloop`, or the clone), `dshloop serve`, `dshloop runloops`,
`dshloop migrate`, `dshloop bootstrap` … run from any directory: the settings, templates, static
files and migrations are inside the package, and the embedded mode's files live in DSHLOOP_VAR_DIR
(by default var/ in a clone, the user's data directory otherwise: dshloop.settings).
"""

from __future__ import annotations

import os
import secrets
import sys
from pathlib import Path

PRIVATE_FILE = 0o600
PRIVATE_DIRECTORY = 0o700

# `runloops` loads only the apps the scheduler runs (dshloop.settings SCHEDULER_PROCESS).
SCHEDULER_PROCESS_ENV = "DSHLOOP_SCHEDULER_PROCESS"


def create_private_file(path: Path, text: str = "") -> None:
    """Make a file that only its owner can read, unless it exists; never widen an existing one."""
    try:
        descriptor = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, PRIVATE_FILE)
    except FileExistsError:
        return
    with os.fdopen(descriptor, "w") as file:
        file.write(text)


def prepare_embedded_files() -> None:
    """The embedded SQLite database and the secret key live under DSHLOOP_VAR_DIR, which a fresh
    clone or a fresh install lacks. Importing settings writes nothing, so the command line makes them
    before a command opens them.

    The database holds staff sign-in sessions and API token hashes: it is made owner-only before
    SQLite first opens it (SQLite gives its -wal and -shm files the database file's mode), and a
    database made readable by an older version is made private again. The key is made once, so that
    sign-ins survive restarts and every process of one install signs with the same key."""
    from django.conf import settings

    try:
        database = settings.DATABASES["default"]
    except Exception:  # noqa: BLE001 - bad settings: the command below reports them properly
        return
    if database["ENGINE"] != "django.db.backends.sqlite3" or str(database["NAME"]) == ":memory:":
        return
    path = Path(database["NAME"])
    path.parent.mkdir(mode=PRIVATE_DIRECTORY, parents=True, exist_ok=True)
    var_dir = Path(settings.VAR_DIR)
    if path.parent == var_dir:  # ours alone; never chmod a shared directory such as /tmp
        path.parent.chmod(PRIVATE_DIRECTORY)
        if not os.environ.get("DJANGO_SECRET_KEY", "").strip():
            create_private_file(settings.SECRET_KEY_FILE, secrets.token_urlsafe(50) + "\n")
    create_private_file(path)  # an empty file is an empty database
    for name in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
        try:
            if name.stat().st_mode & 0o077:
                name.chmod(PRIVATE_FILE)
        except FileNotFoundError:
            pass


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv if argv is None else argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dshloop.settings")
    if argv[1:2] == ["runloops"]:
        os.environ[SCHEDULER_PROCESS_ENV] = "1"  # before anything below imports the settings
    from django.core.management import execute_from_command_line

    prepare_embedded_files()
    execute_from_command_line(argv)


def run() -> None:
    """The console script's entry point."""
    try:
        main()
    except KeyboardInterrupt:
        # Ctrl-C while Django starts, before a command installs its own stop handling (serve's and
        # runloops' handlers come later): a person stopping us, not a crash, so no traceback.
        sys.exit(130)
