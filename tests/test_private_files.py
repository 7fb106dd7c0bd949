"""The embedded database holds staff sign-in sessions and token hashes: it, its -wal and -shm files
and var/ are owner-only from the moment they exist (dshloop.cli prepare_embedded_files)."""

from __future__ import annotations

import os
import sqlite3
import stat
import subprocess
import sys

import pytest
from django.conf import settings

from tests.processes import MANAGE

pytestmark = pytest.mark.process


def manage(*args: str, var_dir) -> None:
    env = {key: value for key, value in os.environ.items() if key not in {"DATABASE_URL", "DJANGO_SETTINGS_MODULE"}}
    env["DSHLOOP_VAR_DIR"] = str(var_dir)
    subprocess.run(
        [sys.executable, str(MANAGE), *args], env=env, cwd=settings.BASE_DIR, check=True, capture_output=True
    )


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_a_fresh_var_directory_and_database_are_owner_only_and_so_are_its_wal_files(tmp_path):
    var = tmp_path / "var"
    previous = os.umask(0o022)  # a usual umask, whatever the test runner's: the child inherits it
    try:
        manage("migrate", "--noinput", var_dir=var)
    finally:
        os.umask(previous)
    database = var / "dshloop.sqlite3"
    assert (mode(var), mode(database)) == (0o700, 0o600)

    # SQLite gives its write-ahead files the database file's mode: open it as the server does.
    connection = sqlite3.connect(database)
    try:
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("CREATE TABLE probe (x)")
        assert mode(f"{database}-wal") == 0o600
        assert mode(f"{database}-shm") == 0o600
    finally:
        connection.close()


def test_a_database_left_readable_by_an_older_version_is_made_private_by_the_next_command(tmp_path):
    var = tmp_path / "var"
    var.mkdir(mode=0o755)
    database = var / "dshloop.sqlite3"
    sqlite3.connect(database).close()
    database.chmod(0o644)
    wal = var / "dshloop.sqlite3-wal"
    wal.write_bytes(b"")
    wal.chmod(0o644)

    manage("check", var_dir=var)

    assert (mode(var), mode(database), mode(wal)) == (0o700, 0o600, 0o600)


def test_the_database_directory_is_left_alone_when_it_is_not_ours(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    shared.chmod(0o755)
    env = {key: value for key, value in os.environ.items() if key != "DJANGO_SETTINGS_MODULE"}
    env["DATABASE_URL"] = f"sqlite:///{shared / 'elsewhere.sqlite3'}"
    subprocess.run(
        [sys.executable, str(MANAGE), "check"], env=env, cwd=settings.BASE_DIR, check=True, capture_output=True
    )
    assert mode(shared) == 0o755
    assert mode(shared / "elsewhere.sqlite3") == 0o600
