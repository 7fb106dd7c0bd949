"""`make run-dsh` (scripts/run-dsh.sh): the whole system on one machine, and Ctrl-C stops all of it.

The script runs as a person runs it, in its own process group with its own var/ directory and
ports, with the stub model as DSH's model. DSH runs the profile's own dshloop (the plugin starts it,
no dshloop address or token given to DSH): an agent's loop_list reaches it through the plugin, a
`self` loop is possible at once, and a SIGINT to the group (what Ctrl-C sends) leaves no process
behind, DSH's dshloop included.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
from pathlib import Path

import httpx
import pytest
from django.conf import settings

from tests.dsh import DshHost, require_dsh_dir
from tests.processes import wait_for
from tests.test_serve import free_port

from .conftest import agent_calls
from .test_own_dshloop import processes_of

pytestmark = [pytest.mark.process, pytest.mark.dsh]

RUN_DSH = Path(settings.BASE_DIR) / "scripts" / "run-dsh.sh"
# tokens.services makes "dsh_" + token_urlsafe(32): 43 URL-safe characters, standing alone.
TOKEN_SHAPE = re.compile(rb"(?<![\w-])dsh_[\w-]{43}(?![\w-])")


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def is_dsh_on(pid: str, port: int) -> bool:
    try:
        arguments = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:  # gone meanwhile
        return False
    return (
        b"web" in arguments
        and any(item.endswith(b"dsh/lib/bin.js") for item in arguments)
        and (str(port).encode() in arguments)
    )


def healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/api/health", timeout=2).status_code == 200
    except httpx.HTTPError:  # not serving yet
        return False


def test_run_dsh_wires_dsh_and_dshloop_and_ctrl_c_stops_everything(tmp_path, stub_model):
    install = require_dsh_dir()
    dshloop_port, dsh_port = free_port(), free_port()
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("DATABASE_URL", "DJANGO_", "DSHLOOP_", "DSH_"))
    }
    env.update(
        stub_model.env(),
        DSHLOOP_VAR_DIR=str(tmp_path / "var"),
        DSHLOOP_PORT=str(dshloop_port),
        DSH_PORT=str(dsh_port),
        DJANGO_SECRET_KEY="test-run-dsh-not-a-secret",
    )
    log = tmp_path / "run-dsh.log"
    with open(log, "wb") as out:
        script = subprocess.Popen(
            [str(RUN_DSH), str(install)], stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    try:
        wait_for(
            lambda: "Ctrl-C stops both." in log.read_text() or script.poll() is not None,
            timeout=120,
            interval=0.5,
            message="run-dsh to print its URLs",
        )
        text = log.read_text()
        assert script.poll() is None, text
        assert (
            f"DSH Web:  http://127.0.0.1:{dsh_port}" in text
            and f"dshloop:  http://127.0.0.1:{dshloop_port}/panel/" in text
        )
        assert f"(log in at http://127.0.0.1:{dshloop_port}/admin/)" in text  # the port served, not 8000
        assert f"agents answer with the model at DEEPSEEK_BASE_URL ({stub_model.url})" in text  # not "DeepSeek's"
        wait_for(
            lambda: healthy(f"http://127.0.0.1:{dshloop_port}"),
            timeout=60,
            interval=0.5,
            message="dshloop to answer",
        )

        dsh = DshHost(install, tmp_path / "var" / "dsh-home", port=dsh_port)  # the script's DSH, only called
        dsh.call("session.create", {"sessionId": "ses-try", "cwd": str(tmp_path)})
        assert agent_calls(dsh, "ses-try", "loop_list", {}).json() == {"loops": []}  # token wired
        made = agent_calls(
            dsh,
            "ses-try",
            "loop_create",
            {"prompt": "Report", "schedule": {"kind": "after", "after_seconds": 600}, "session_id": "self"},
        ).json()
        assert made["session_id"] == "self"  # a global interface session out of the box
        # ... in which a turn has run, so that DSH Web never opens it as a person's new chat (what
        # it opens is a session with none: `blank`; test_session_names_browser.py types into it).
        made_global = dsh.sessions()["dshloop-global"]
        assert made_global["blank"] is False
        assert made_global["projections"]["values"]["title"] == "dshloop: global interface"
        data_dir = tmp_path / "var" / "dsh-home" / "profiles" / "web" / "dshloop"  # the profile's own
        assert data_dir.stat().st_mode & 0o777 == 0o700 and (data_dir / "dshloop.sqlite3").is_file()
        assert processes_of(str(data_dir))
        # Requests are not news: the terminal keeps what a person needs (the URLs, the admin line).
        assert "POST /api/tools/" not in log.read_text() and "GET /api/health" not in log.read_text()

        # The token was made in DSH and went to dshloop over a pipe: neither DSH's environment nor
        # dshloop's holds it or names a dshloop to connect to, and no file the script or they wrote
        # holds anything token-shaped (dshloop's database keeps hashes).
        [dsh_pid] = [pid for pid in os.listdir("/proc") if pid.isdigit() and is_dsh_on(pid, dsh_port)]
        for pid in [dsh_pid, *processes_of(str(data_dir))]:
            environment = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            assert not [
                item
                for item in environment
                if TOKEN_SHAPE.search(item) or item.startswith((b"DSHLOOP_TOKEN", b"DSHLOOP_URL="))
            ]
            assert not TOKEN_SHAPE.search(Path(f"/proc/{pid}/cmdline").read_bytes())
        assert not [
            path for path in (tmp_path / "var").rglob("*") if path.is_file() and TOKEN_SHAPE.search(path.read_bytes())
        ]
    finally:
        if script.poll() is None:
            os.killpg(script.pid, signal.SIGINT)  # Ctrl-C reaches the whole foreground group
        try:
            script.wait(40)
        finally:
            leftover = group_alive(script.pid)
            if leftover:
                os.killpg(script.pid, signal.SIGKILL)
    assert not leftover, f"processes left after Ctrl-C:\n{log.read_text()[-3000:]}"
    # DSH's dshloop went with it (its scheduler may take a few seconds more to finish stopping).
    data_dir = str(tmp_path / "var" / "dsh-home" / "profiles" / "web" / "dshloop")
    wait_for(lambda: not processes_of(data_dir), timeout=30, interval=0.2, message="DSH's dshloop to stop")
    assert "stopped DSH and dshloop" in log.read_text()
    assert "Traceback" not in log.read_text()
