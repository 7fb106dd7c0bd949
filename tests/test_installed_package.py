"""dshloop as an installed program: a wheel built from the clone, installed into a fresh virtualenv
outside it, runs from another directory with nothing of the source tree: `dshloop migrate`,
`dshloop bootstrap` and `dshloop serve` (the panel's templates and static files, the migrations and
the scheduler all from the package), it delivers a loop on the embedded host, and it carries the
built DSH plugin, which `dshloop dsh install` adds to a DSH profile."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from django.conf import settings

from tests.dsh import dsh_dir
from tests.processes import wait_for
from tests.test_serve import free_port

pytestmark = [pytest.mark.process, pytest.mark.engine_independent]  # the program uses its own SQLite


def build_wheel(out: Path) -> Path:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--wheel-dir", str(out), str(settings.BASE_DIR)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    [wheel] = out.glob("dshloop-*.whl")
    return wheel


def fresh_venv_with(wheel: Path, venv: Path) -> Path:
    """A virtualenv of its own, its dependencies from the package index (pip's cache, on a second run)."""
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True, timeout=120)
    done = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", str(wheel)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return venv / "bin" / "dshloop"


def test_a_wheel_installed_outside_the_clone_migrates_serves_and_delivers_a_loop(tmp_path):
    command = fresh_venv_with(build_wheel(tmp_path / "dist"), tmp_path / "venv")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # Nothing points back at the clone or at the test database: the program's own defaults.
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("DATABASE_URL", "DJANGO_", "DSHLOOP_", "PYTHON", "VIRTUAL_ENV"))
    }
    env.update(HOME=str(tmp_path / "home"), XDG_DATA_HOME="", PYTHONUNBUFFERED="1")

    def dshloop(*args: str) -> str:
        done = subprocess.run(
            [str(command), *args], cwd=elsewhere, env=env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
        return done.stdout

    dshloop("migrate", "--noinput")
    data = tmp_path / "home" / ".local" / "share" / "dshloop"  # the user's data directory, made private
    assert (data / "dshloop.sqlite3").is_file() and (data / "secret_key").is_file()
    assert (data.stat().st_mode & 0o077, (data / "secret_key").stat().st_mode & 0o077) == (0, 0)
    [token] = re.findall(r"API token created \(scopes [^)]*\): (\S+)", dshloop("bootstrap"))

    port = free_port()
    log_path = tmp_path / "serve.log"
    with open(log_path, "wb") as log:
        server = subprocess.Popen(
            [str(command), "serve", f"127.0.0.1:{port}"],
            cwd=elsewhere,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    base = f"http://127.0.0.1:{port}"
    try:

        def answers() -> bool:
            assert server.poll() is None, log_path.read_text()[-3000:]
            try:
                return httpx.get(f"{base}/api/health", timeout=2).status_code in (200, 503)
            except httpx.HTTPError:
                return False

        wait_for(answers, timeout=60, message="the installed dshloop to answer")
        assert httpx.get(f"{base}/static/panel/panel.css", timeout=5).status_code == 200
        sign_in = httpx.get(f"{base}/panel/", timeout=5, follow_redirects=True)
        assert sign_in.status_code == 200 and "password" in sign_in.text.lower()

        headers = {"Authorization": f"Bearer {token}"}
        made = httpx.post(
            f"{base}/api/loops",
            json={"prompt": "tick", "schedule": {"kind": "every", "every_seconds": 1}, "session_id": "self"},
            headers=headers,
            timeout=10,
        )
        assert made.status_code in (200, 201), made.text
        loop_id = made.json()["loop_id"]

        def delivered() -> bool:
            runs = httpx.get(f"{base}/api/loops/{loop_id}/runs", headers=headers, timeout=5).json()["runs"]
            return any(run["status"] == "delivered" for run in runs)

        wait_for(delivered, timeout=30, message="a delivery by the installed scheduler")
    finally:
        os.killpg(server.pid, signal.SIGINT)
        try:
            server.wait(30)
        finally:
            if server.poll() is None:
                os.killpg(server.pid, signal.SIGKILL)
    log = log_path.read_text()
    assert "scheduler stopped" in log and "Traceback" not in log, log[-3000:]

    # The wheel carries the DSH plugin, built: `dshloop dsh install` adds that copy to a DSH profile.
    shipped = next((tmp_path / "venv").glob("lib/python*/site-packages/dshloop/dsh-plugin"))
    for name in ("package.json", "cordis.patch.yml", "manifest.json", "lib/index.js", "lib/client.js"):
        assert (shipped / name).read_bytes() == (Path(settings.BASE_DIR) / "dsh-plugin" / name).read_bytes(), name
    install = dsh_dir()
    if install is not None:  # DSH's own `plugin add` needs a DSH (tests/dsh_plugin/ require one)
        dshloop("dsh", "install", "--dsh", str(install), "--dsh-home", str(tmp_path / "dsh-home"))
        linked = tmp_path / "dsh-home" / "profiles" / "web" / "node_modules" / "@dshloop" / "dsh-plugin"
        assert linked.resolve() == shipped.resolve()
