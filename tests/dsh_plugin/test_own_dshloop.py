"""The profile owns dshloop: a real DSH rc.8 with the plugin and no dshloop variables at all (plain
`dsh web`, `dshloop` on its PATH) starts dshloop itself, its data in the profile's private
directory, the token made in DSH and handed over on a pipe. An agent's loop comes back to it; a
dshloop killed with -9 is restarted and the next occurrence arrives once; a second DSH on the
profile starts no second scheduler; no agent's bash finds the token; DSH killed, no dshloop
process remains. Without a `dshloop` to run, DSH's log says so in one line and DSH Web works on.
"""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.dsh import NODE_BIN, DshHost, require_dsh_dir
from tests.processes import wait_for
from tokens.models import hash_token

from .conftest import INSTALL_PLUGIN, agent_calls
from .test_token_out_of_reach import CANARY, PROBE, TOKEN_SHAPE

pytestmark = [pytest.mark.process, pytest.mark.dsh]

SERVES = re.compile(r"this profile's dshloop serves (http://127\.0\.0\.1:\d+) \(pid (\d+), data in ([^)]+)\)")


def installed_home(tmp_path: Path) -> Path:
    home = tmp_path / "dsh-home"
    done = subprocess.run(
        [str(INSTALL_PLUGIN), str(require_dsh_dir()), str(home)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return home


def dshloop_on_path(tmp_path: Path) -> Path:
    """A `dshloop` command, as `pip install dshloop` puts on PATH: this checkout's, run by this Python."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    command = bin_dir / "dshloop"
    command.write_text(f'#!/bin/sh\nexec {sys.executable} -m dshloop "$@"\n')
    command.chmod(0o755)
    return bin_dir


def plain_dsh(install: Path, home: Path, stub_model, path: str, monkeypatch) -> DshHost:
    # No dshloop variable reaches DSH: what a person's own shell gives `dsh web`.
    for name in [name for name in os.environ if name.startswith(("DSHLOOP_", "DJANGO_", "DATABASE_URL"))]:
        monkeypatch.delenv(name)
    return DshHost(install, home, env={**stub_model.env(), "PATH": f"{install / NODE_BIN}{os.pathsep}{path}"})


def serving(dsh: DshHost, after: int = 0) -> re.Match:
    return wait_for(
        lambda: (found := list(SERVES.finditer(dsh.log()))) and len(found) > after and found[after],
        timeout=90,
        interval=0.2,
        message=f"dshloop start {after + 1} in DSH's log",
    )


def processes_of(data_dir: str) -> list[int]:
    """Every process whose environment says it is this profile's dshloop (serve and its scheduler)."""
    marker = f"DSHLOOP_VAR_DIR={data_dir}".encode()
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if marker in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                found.append(int(pid))
        except OSError:
            continue
    return found


def keys(dsh: DshHost, session_id: str) -> list[str]:
    return [event["data"]["source"]["deliveryKey"] for event in dsh.loop_messages(session_id)]


def test_plain_dsh_runs_the_profiles_own_dshloop(tmp_path, stub_model, monkeypatch):
    install = require_dsh_dir()
    home = installed_home(tmp_path)
    path = f"{dshloop_on_path(tmp_path)}{os.pathsep}/usr/bin:/bin"
    dsh = plain_dsh(install, home, stub_model, path, monkeypatch).start()
    second = None
    try:
        first = serving(dsh)
        data_dir = first[3]
        assert data_dir == str(home / "profiles" / "web" / "dshloop")
        assert Path(data_dir).stat().st_mode & 0o777 == 0o700
        assert {"dshloop.sqlite3", "secret_key"} <= {item.name for item in Path(data_dir).iterdir()}

        # An agent's loop, created through the plugin's tools, is delivered back into its session.
        work = tmp_path / "work"
        work.mkdir()
        dsh.call("session.create", {"sessionId": "ses-own", "cwd": str(work)})
        made = agent_calls(
            dsh, "ses-own", "loop_create", {"prompt": "tick", "schedule": {"kind": "every", "every_seconds": 2}}
        ).json()
        assert made["session_id"] == "ses-own"
        wait_for(lambda: keys(dsh, "ses-own"), timeout=30, interval=0.3, message="the loop's first delivery")

        # kill -9: the plugin starts dshloop again, and the loop goes on, each occurrence once.
        os.kill(int(first[2]), signal.SIGKILL)
        again = serving(dsh, after=1)
        assert again[2] != first[2]
        before = len(keys(dsh, "ses-own"))
        wait_for(lambda: len(keys(dsh, "ses-own")) >= before + 2, timeout=40, interval=0.3, message="deliveries after")
        assert not [key for key, count in Counter(keys(dsh, "ses-own")).items() if count > 1]
        assert "exited unexpectedly with signal SIGKILL" in dsh.log()

        # A second DSH on the same profile starts no second scheduler.
        second = DshHost(install, home, env=dsh.extra_env, log_dir=tmp_path / "second").start()
        wait_for(
            lambda: "another DSH runs this profile's dshloop" in second.log(),
            timeout=60,
            interval=0.2,
            message="the second DSH to find the profile's dshloop running",
        )
        assert processes_of(data_dir) and int(again[2]) in processes_of(data_dir)
        assert (
            len([pid for pid in processes_of(data_dir) if b"serve" in Path(f"/proc/{pid}/cmdline").read_bytes()]) == 1
        )
        second.stop()

        # The token lives in DSH's memory and dshloop's database hash only: an agent finds none.
        (home / "notes.txt").write_text(f"a token-shaped canary: {CANARY}\n")
        command = PROBE.replace("__SHAPE__", TOKEN_SHAPE).replace("__DIRS__", f"'{home}' '{work}'")
        probe = agent_calls(dsh, "ses-own", "bash", {"command": command, "description": "look for tokens"}, timeout=90)
        assert "probe done" in probe.text and f"notes.txt:{CANARY}" in probe.text, probe.text
        # The token itself is known to DSH's memory only; its hash is in the profile's database
        # (every one this profile's plugin made), so whatever token-shaped string the probe found
        # (other tokens may lie in /tmp) is checked against those.
        with sqlite3.connect(Path(data_dir) / "dshloop.sqlite3") as database:
            plugin_hashes = {
                row[0] for row in database.execute("SELECT key_hash FROM tokens_apitoken WHERE name = 'dsh-plugin'")
            }
        assert plugin_hashes
        found = set(re.findall(TOKEN_SHAPE, probe.text))
        assert CANARY in found and not {item for item in found if hash_token(item) in plugin_hashes}, probe.text
        assert agent_calls(dsh, "ses-own", "loop_list", {}).json()["loops"]  # the plugin still holds it

        # DSH gone without a word (kill -9: no plugin disposal runs): its dshloop and that dshloop's
        # scheduler go too, since the pipe on dshloop's stdin ends with DSH. (make run-dsh's test
        # stops DSH politely, and the plugin stops dshloop itself.)
        os.kill(dsh.pid, signal.SIGKILL)
        wait_for(lambda: not processes_of(data_dir), timeout=30, interval=0.2, message="no dshloop process left")
    finally:
        if second is not None:
            second.stop()
        dsh.stop()


def test_without_a_dshloop_to_run_dsh_says_so_in_one_line_and_works_on(tmp_path, stub_model, monkeypatch):
    install = require_dsh_dir()
    home = installed_home(tmp_path)
    dsh = plain_dsh(install, home, stub_model, "/usr/bin:/bin", monkeypatch).start()
    try:
        line = wait_for(
            lambda: next(
                (line for line in dsh.log().splitlines() if "cannot start this profile's dshloop" in line), None
            ),
            timeout=30,
            interval=0.2,
            message="DSH's log to say why",
        )
        assert 'no "dshloop" command on DSH\'s PATH. Install it (pip install dshloop' in line
        assert "DSH Web keeps working" in line
        assert dsh.log().count("cannot start this profile's dshloop") == 1  # said once, not per retry
        assert dsh.call("host.describe", {})  # DSH answers
        dsh.call("session.create", {"sessionId": "ses-none", "cwd": str(tmp_path)})
        answer = agent_calls(dsh, "ses-none", "loop_list", {})
        assert answer.is_error and "dshloop is not reachable" in answer.text
    finally:
        dsh.stop()
