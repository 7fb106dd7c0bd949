"""The plugin installs the DSH way, with no build: DSH's own `dsh plugin --profile web add` of the
committed files alone (what a tag of the repository or a folder of it gives a person: no
node_modules, lib/ as committed) into a fresh DSH home, then a real DSH boots with it loaded: its
channel answers and an agent is offered the loop tools. And `dshloop dsh install` adds the plugin
this dshloop ships in the same way."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from django.conf import settings

from tests.dsh import BIN_JS, NODE_BIN, DshHost, require_dsh_dir
from tests.test_serve import free_port

from .conftest import agent_calls

pytestmark = [pytest.mark.process, pytest.mark.dsh]

REPO = Path(settings.BASE_DIR)


def committed_plugin(into: Path) -> Path:
    """A copy of dsh-plugin/ as git has it: what `github:…#tag&path:dsh-plugin` would fetch."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "dsh-plugin"], cwd=REPO, check=True, capture_output=True
    ).stdout.split(b"\0")
    for name in filter(None, (item.decode() for item in listed)):
        if not (REPO / name).exists():  # deleted and not committed yet: gone from the next commit
            continue
        target = into / Path(name).relative_to("dsh-plugin")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REPO / name, target)
    return into


def dsh_env(install: Path, home: Path) -> dict[str, str]:
    return {
        **{key: value for key, value in os.environ.items() if not key.startswith(("DSH_", "DSHLOOP_"))},
        "PATH": f"{install / NODE_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "DSH_HOME": str(home),
        "DSH_TELEMETRY_DISABLED": "1",
    }


def hello(dsh: DshHost) -> dict:
    body = {"type": "client-request", "rpcId": "hello", "method": "hello", "payload": {}}
    request = urllib.request.Request(
        f"{dsh.url}/dshloop/hello", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.load(response)["result"]


def test_the_committed_plugin_installs_with_dsh_plugin_add_and_loads_without_a_build(tmp_path, stub_model):
    install = require_dsh_dir()
    plugin = committed_plugin(tmp_path / "plugin")
    assert not (plugin / "node_modules").exists() and (plugin / "lib" / "index.js").is_file()
    home = tmp_path / "dsh-home"
    done = subprocess.run(
        [str(install / NODE_BIN / "node"), str(install / BIN_JS), "plugin", "--profile", "web", "add", str(plugin)],
        env=dsh_env(install, home),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    profile = json.loads((home / "profiles" / "web" / "package.json").read_text())
    assert "@dshloop/dsh-plugin" in profile["dsh"]["profile"]["bundles"]

    # An external dshloop that is not there: the plugin loads all the same, and says so per call.
    nowhere = f"http://127.0.0.1:{free_port()}"
    dsh = DshHost(install, home, env={**stub_model.env(), "DSHLOOP_URL": nowhere}).start()
    try:
        assert hello(dsh) == {
            "ok": True,
            "value": {"plugin": "dshloop", "deliver": True, "confirm": True, "sessions": True},
        }
        dsh.call("session.create", {"sessionId": "ses-installed", "cwd": str(tmp_path)})
        answer = agent_calls(dsh, "ses-installed", "loop_list", {})
        assert answer.is_error and f"dshloop is not reachable at {nowhere}" in answer.text, answer.text
    finally:
        dsh.stop()


def test_dshloop_dsh_install_adds_the_plugin_this_dshloop_ships(tmp_path):
    install = require_dsh_dir()
    home = tmp_path / "dsh-home"
    done = subprocess.run(
        [sys.executable, "-m", "dshloop", "dsh", "install", "--dsh", str(install), "--dsh-home", str(home)],
        env={key: value for key, value in os.environ.items() if not key.startswith(("DSH_", "DSHLOOP_DSH"))},
        cwd=REPO,  # `-m dshloop` is this checkout's, whatever the virtualenv has installed
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"is in DSH profile 'web' in {home}. Restart DSH" in done.stdout
    profile = home / "profiles" / "web"
    assert "@dshloop/dsh-plugin" in json.loads((profile / "package.json").read_text())["dsh"]["profile"]["bundles"]
    linked = (profile / "node_modules" / "@dshloop" / "dsh-plugin").resolve()
    assert linked == (REPO / "dsh-plugin").resolve()  # a clone ships its own dsh-plugin/

    # No DSH to be found: one line saying where to point it, and nothing changed.
    missing = subprocess.run(
        [sys.executable, "-m", "dshloop", "dsh", "install", "--dsh-home", str(tmp_path / "other")],
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert missing.returncode != 0 and "no `dsh` on PATH: pass --dsh" in missing.stderr, missing.stderr
    assert not (tmp_path / "other").exists()
