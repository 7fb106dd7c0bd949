"""A real DSH rc.8 with dshloop's plugin (dsh-plugin/) installed, a stub model, and a real dshloop.

Per test module: one stub model (tests/stub_model.py) and one DSH whose DSH_HOME has the plugin
(scripts/install-dsh-plugin.sh), started as a launcher connects it to an external dshloop:
DSHLOOP_URL in its environment, the token on a pipe (DSHLOOP_TOKEN_FD), never in the environment.
(The profile's own dshloop, which the plugin starts without DSHLOOP_URL: test_own_dshloop.py.)
Per test: a real `manage.py serve` (the API and its `runloops` scheduler) with DSHLOOP_HOST=dsh on
that URL, and the token's row in the test database. A DSH boots in ~2 s: sharing one per module
keeps these tests few seconds each.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import uuid
from pathlib import Path

import pytest
from django.conf import settings

from tests.dsh import DshHost, require_dsh_dir
from tests.panel.conftest import start_chromium
from tests.processes import wait_for
from tests.stub_model import StubModel
from tests.test_serve import Serve, free_port
from tokens.management.commands.dsh_plugin_token import PLUGIN_SCOPES, TOKEN_NAME
from tokens.models import ApiToken, hash_token

INSTALL_PLUGIN = Path(settings.BASE_DIR) / "scripts" / "install-dsh-plugin.sh"
# The token the plugin gets (one DSH per module); each test gives it a row in its (flushed) database,
# as `manage.py dsh_plugin_token` would.
TOKEN = "dsh_" + secrets.token_urlsafe(32)


@pytest.fixture(scope="module")
def stub_model():
    with StubModel() as model:
        yield model


@pytest.fixture(scope="module")
def dshloop_port() -> int:
    return free_port()


@pytest.fixture(scope="module")
def plugin_dsh(tmp_path_factory, stub_model, dshloop_port):
    install = require_dsh_dir()
    home = tmp_path_factory.mktemp("plugin-dsh") / "dsh-home"
    done = subprocess.run([str(INSTALL_PLUGIN), str(install), str(home)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"install-dsh-plugin.sh failed:\n{done.stdout}\n{done.stderr}"
    host = DshHost(
        install,
        home,
        env={**stub_model.env(), "DSHLOOP_URL": f"http://127.0.0.1:{dshloop_port}"},
        plugin_token=TOKEN,
    ).start()
    yield host
    host.stop()


@pytest.fixture
def workspace(tmp_path) -> Path:
    path = tmp_path / "work"
    path.mkdir()
    return path


class Dshloop:
    """`manage.py serve` on a fixed port, so that it can stop and come back at the URL DSH knows."""

    def __init__(self, log_dir: Path, port: int, env: dict[str, str]):
        self.log_dir, self.port, self.env = log_dir, port, env
        self.server: Serve | None = None
        self.starts = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Dshloop:
        self.starts += 1
        log_dir = self.log_dir / f"serve-{self.starts}"
        log_dir.mkdir()
        self.server = Serve(log_dir, port=self.port, **self.env)
        self.server.wait_serving()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            self.server = None


def start_dshloop(tmp_path, port: int, dsh, workspace, **settings: str) -> Dshloop:
    """`serve` with DSHLOOP_HOST=dsh on `dsh`, the plugin's token in the database, more `settings` on top."""
    ApiToken.objects.create(name=TOKEN_NAME, key_hash=hash_token(TOKEN), prefix=TOKEN[:8], scopes=PLUGIN_SCOPES)
    environment = {
        "DSHLOOP_HOST": "dsh",
        "DSHLOOP_DSH_URL": dsh.url,
        "DSHLOOP_DSH_CWD": str(workspace),
        # Serve's short lease (a run cut off by a stop is re-driven soon after a start), which on
        # a remote host must outlast three host calls (settings): 3 s each, for a loopback DSH.
        "DSHLOOP_RUN_LEASE_SECONDS": "10",
        "DSHLOOP_HOST_TIMEOUT_SECONDS": "3",
    }
    return Dshloop(tmp_path, port, environment | settings).start()


@pytest.fixture
def dshloop(transactional_db, tmp_path, plugin_dsh, dshloop_port, workspace):
    server = start_dshloop(tmp_path, dshloop_port, plugin_dsh, workspace)
    yield server
    server.stop()


class ToolResult:
    def __init__(self, event: dict):
        [block] = event["data"]["message"]["content"]
        self.is_error: bool = block["isError"]
        self.text: str = "".join(part.get("text", "") for part in block["content"])

    def json(self):
        assert not self.is_error, self.text
        return json.loads(self.text)


def agent_calls(dsh: DshHost, session_id: str, tool: str, arguments: dict, timeout: float = 30) -> ToolResult:
    """Make the session's agent call `tool` (the stub model obeys CALLTOOL) and return the result DSH
    recorded in the session's history for that call."""
    rpc_id = f"calltool-{uuid.uuid4()}"
    text = f"CALLTOOL {tool} {json.dumps(arguments)}"
    prompt = {"sessionId": session_id, "mode": "queue", "content": [{"type": "text", "text": text}]}
    dsh.call("session.prompt", prompt, rpc_id=rpc_id)

    def result():
        events = dsh.history(session_id)
        asked = next((e["seq"] for e in events if e["data"].get("source", {}).get("rpcId") == rpc_id), None)
        if asked is None:
            return None
        calls = [e for e in events if e["type"] == "tool/call" and e["seq"] > asked and e["data"]["name"] == tool]
        if not calls:
            return None
        call_id = calls[0]["data"]["callId"]
        return next(
            (
                ToolResult(e)
                for e in events
                if e["type"] == "tool/result" and e["data"]["message"]["source"].get("callId") == call_id
            ),
            None,
        )

    return wait_for(result, timeout=timeout, interval=0.2, message=f"{session_id}'s agent to call {tool}")


# -- DSH Web in Debian's headless Chromium (the browser tests of this package) --


@pytest.fixture(scope="module")
def driver():
    chromium = start_chromium(window="1280,800")
    yield chromium
    chromium.quit()


@pytest.fixture
def screenshots(tmp_path):
    if os.environ.get("DSHLOOP_SCREENSHOTS") == "1":
        from django.conf import settings

        return settings.BASE_DIR / "docs" / "screenshots"
    return tmp_path


def pytest_collection_modifyitems(config, items):
    """DSH with the plugin and DSH Web do not depend on the database's engine: their tests run on
    the SQLite pass only, which keeps CI's time for the tests that do (a skip with its reason)."""
    if not getattr(settings, "POSTGRES_PASS", False):
        return
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.path).parents and (item.get_closest_marker("dsh") or item.get_closest_marker("browser")):
            item.add_marker(pytest.mark.skip(reason="engine-independent (DSH and DSH Web): runs on the SQLite pass"))
