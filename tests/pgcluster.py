"""A private, throwaway PostgreSQL cluster for tests that must stop or restart the server.

The suite's PostgreSQL pass shares the machine's server with everything else on it; a test that
restarts *that* breaks every other run. PgCluster runs initdb into a temporary directory and
serves it on a free port of 127.0.0.1, with its unix socket in the same directory, so the test
can stop and start it at will and nothing else notices.

initdb and postgres refuse to run as root (CI runs as root here): then every server command runs
as the `postgres` OS user, which owns the directory.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

SERVER_USER = "postgres"  # who runs the server when we are root


def find_bindir() -> Path | None:
    """initdb's directory: on PATH, else Debian's /usr/lib/postgresql/<version>/bin (newest)."""
    on_path = shutil.which("initdb")
    if on_path:
        return Path(on_path).resolve().parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    return Path(versions[-1]).parent if versions else None


def unavailable_reason() -> str | None:
    """Why a private cluster cannot be made on this machine, or None if it can."""
    if find_bindir() is None:
        return "initdb not found (on PATH or under /usr/lib/postgresql/*/bin): install the PostgreSQL server"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(SERVER_USER)
        except KeyError:
            return f"running as root and there is no {SERVER_USER!r} OS user to run initdb/postgres as"
    return None


def free_port() -> int:
    """A port nothing listens on right now (the kernel picks it; the race until the server binds
    it is harmless on a test machine, and start() fails loudly if it is lost)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class PgCluster:
    """initdb → start → (stop / start / restart)* → close. close() always leaves no server behind."""

    def __init__(self, *, keep_log_in: Path | None = None):
        self.bindir = find_bindir()
        self.port = free_port()
        # Not pytest's tmp_path: pytest's temp root is private to its user (0700), which the server
        # user cannot enter when we are root, and a unix socket path must stay under ~100 bytes.
        self.root = Path(tempfile.mkdtemp(prefix="dshloop-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self.keep_log_in = keep_log_in  # close() copies the server log there, for post-mortems
        self.as_root = os.geteuid() == 0
        if self.as_root:
            user = pwd.getpwnam(SERVER_USER)
            os.chown(self.root, user.pw_uid, user.pw_gid)

    def _run(self, tool: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
        command = [str(self.bindir / tool), *args]
        if self.as_root:
            command = ["runuser", "-u", SERVER_USER, "--", *command]
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=self.root)
        if result.returncode != 0:
            raise RuntimeError(
                f"{tool} {' '.join(args)} failed ({result.returncode}):\n{result.stdout}\n"
                f"{result.stderr}\n{self.log_tail()}"
            )
        return result

    def init(self) -> PgCluster:
        self._run(
            "initdb",
            "-D",
            str(self.data),
            "-U",
            "postgres",
            "-A",
            "trust",
            "-E",
            "UTF8",
            "--locale=C",
            "--no-sync",
            "--no-instructions",
        )
        with open(self.data / "postgresql.conf", "a") as conf:
            conf.write(
                f"port = {self.port}\n"
                "listen_addresses = '127.0.0.1'\n"
                f"unix_socket_directories = '{self.root}'\n"
                # Throwaway data: durability costs time and disk writes and proves nothing here.
                "fsync = off\nsynchronous_commit = off\nfull_page_writes = off\n"
                "shared_buffers = 32MB\n"
            )
        return self

    def start(self) -> None:
        # -w: return once the server accepts connections.
        self._run("pg_ctl", "start", "-w", "-t", "60", "-D", str(self.data), "-l", str(self.log))

    def stop(self, mode: str = "fast") -> None:
        """fast: connections are cut at once (clients see the server go away), as in a restart."""
        self._run("pg_ctl", "stop", "-w", "-t", "60", "-m", mode, "-D", str(self.data))

    def restart(self) -> None:
        self.stop()
        self.start()

    def running(self) -> bool:
        return self.postmaster_pid() is not None

    def postmaster_pid(self) -> int | None:
        try:
            return int((self.data / "postmaster.pid").read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return None

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}"

    def create_database(self, name: str) -> str:
        """CREATE DATABASE name; returns its URL."""
        import psycopg

        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "server log:\n" + "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no server log)"

    def close(self) -> None:
        """Stop the server (immediate: nothing here is worth a clean shutdown) and delete everything."""
        try:
            if self.running():
                try:
                    self.stop(mode="immediate")
                except (RuntimeError, subprocess.TimeoutExpired):
                    pid = self.postmaster_pid()
                    if pid:
                        try:
                            os.kill(pid, 9)  # the postmaster; its children exit when it is gone
                        except ProcessLookupError:
                            pass
            if self.keep_log_in is not None and self.log.exists():
                shutil.copy(self.log, self.keep_log_in / "postgresql.log")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
