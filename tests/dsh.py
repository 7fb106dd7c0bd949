"""A real DeepSeek Harness (DSH) host for tests of the `dsh` adapter.

scripts/install-dsh.sh installs DSH into a cache directory (DSHLOOP_DSH_DIR, default
/var/cache/dshloop/dsh-<version>); `.ci/run` and `make dsh` run it. DshHost starts one real `dsh web`
process on a free loopback port with its own DSH_HOME, waits until it answers, and stops it by PID.
Its HTTP API and behaviour: ../shared/DSH-HOST.md. No DeepSeek key exists here: a prompted turn ends
with MISSING_CREDENTIAL, and the message is still in the session's history.

    host = DshHost(dsh_dir(), tmp_path / "dsh-home").start()
    host.rpc("session.create", {"sessionId": "s1"})  # -> {"ok": True, "value": {...}}
    host.restart()  # same port and DSH_HOME: every session is now cold
    host.stop()
"""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest

DSH_VERSION = "0.1.0-rc.8"
DEFAULT_DSH_DIR = Path("/var/cache/dshloop") / f"dsh-{DSH_VERSION}"
BIN_JS = Path("app/node_modules/@deepseek-ai/dsh/lib/bin.js")
NODE_BIN = Path("tools/node_modules/.bin")

# The first line `dsh web` prints; it comes BEFORE boot finishes (and before a boot crash), so it
# gives the port, never readiness (DSH-HOST.md §0.3).
_URL_LINE = re.compile(rb"dsh web: (http://127\.0\.0\.1:(\d+))")
# Inherited variables that would change what the host does; a test passes them in `env` on purpose.
_SCRUBBED_ENV = ("DEEPSEEK_API_KEY", "DEEPSEEK_BASE_URL", "DSH_HOME", "NODE_OPTIONS", "DSHLOOP_TOKEN")
# Where dshloop's plugin finds the descriptor its token arrives on (dsh-plugin/src/token.ts).
TOKEN_FD_VARIABLE = "DSHLOOP_TOKEN_FD"


def token_pipe(token: str) -> int:
    """The read end of a pipe that holds `token` and then ends (its write end is closed), for a
    child to inherit; the caller closes it once the child has started."""
    read_end, write_end = os.pipe()
    with os.fdopen(write_end, "w") as writer:
        writer.write(token + "\n")  # far below a pipe's buffer: never blocks
    return read_end


def configured_dsh_dir() -> Path:
    return Path(os.environ.get("DSHLOOP_DSH_DIR") or DEFAULT_DSH_DIR)


def dsh_dir() -> Path | None:
    """The DSH install to test against, or None when scripts/install-dsh.sh has not finished there."""
    path = configured_dsh_dir()
    if (
        (path / f".installed-{DSH_VERSION}").is_file()
        and (path / BIN_JS).is_file()
        and (path / NODE_BIN / "node").exists()
    ):
        return path
    return None


def require_dsh_dir() -> Path:
    """dsh_dir(), else skip the test with the reason; under CI=true a missing DSH fails it instead."""
    path = dsh_dir()
    if path is not None:
        return path
    reason = (
        f"DSH {DSH_VERSION} is not installed in {configured_dsh_dir()} (DSHLOOP_DSH_DIR): "
        f"run `make dsh` or scripts/install-dsh.sh DIR"
    )
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true and {reason}", pytrace=False)
    pytest.skip(reason)


class DshHost:
    """One `dsh web` process on 127.0.0.1.

    port=0 lets the OS choose on the first start; restart() reuses the port it got, so a URL given
    to dshloop (DSHLOOP_DSH_URL) stays valid. `env` adds variables (e.g. DEEPSEEK_BASE_URL and
    DEEPSEEK_API_KEY for a mock LLM); start n writes its output to
    log_dir/<home's name>-<n>.log (log_dir defaults to the parent of `home`). `plugin_token` is
    handed to dshloop's plugin on a pipe at every start, as scripts/run-dsh.sh does (never in
    DSH's environment: docs/dsh.md, "The plugin's token").
    """

    def __init__(
        self,
        install_dir: Path,
        home: Path,
        *,
        port: int = 0,
        env: dict | None = None,
        log_dir: Path | None = None,
        plugin_token: str | None = None,
    ):
        self.install_dir = Path(install_dir)
        self.home = Path(home)
        self.port = port
        self.extra_env = dict(env or {})
        self.plugin_token = plugin_token
        self.log_dir = Path(log_dir) if log_dir is not None else self.home.parent
        self.tmp_dir = self.home.parent / f"{self.home.name}-tmp"  # the host's TMPDIR
        self.process: subprocess.Popen | None = None
        self.log_path: Path | None = None
        self.starts = 0
        self.stopped = False

    # -- lifecycle -----------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        assert self.port, "the host has not started yet"
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.process is not None, "the host is not running"
        return self.process.pid

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def env(self) -> dict:
        env = {key: value for key, value in os.environ.items() if key not in _SCRUBBED_ENV}
        env.update(
            PATH=f"{self.install_dir / NODE_BIN}{os.pathsep}{env.get('PATH', '')}",
            DSH_HOME=str(self.home),  # else any bin.js call writes ~/.dsh
            DSH_TELEMETRY_DISABLED="1",
            # Each boot makes a dsh-spill-* directory in os.tmpdir() and leaves it at exit: keep it here.
            TMPDIR=str(self.tmp_dir),
        )
        env.update(self.extra_env)
        return env

    def start(self, timeout: float = 60) -> DshHost:
        """Start the host and wait until POST /api/host.describe answers ok. A process that exits
        first, or no answer within `timeout`, fails the test with the host's log."""
        assert not self.running(), f"DSH is already running (pid {self.pid})"
        self.home.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.tmp_dir.mkdir(parents=True, exist_ok=True)
        self.starts += 1
        self.stopped = False
        self.log_path = self.log_dir / f"{self.home.name}-{self.starts}.log"  # beside DSH_HOME
        command = [
            str(self.install_dir / NODE_BIN / "node"),
            str(self.install_dir / BIN_JS),
            "web",
            "--patch",  # the boot fix (DSH-HOST.md §1, workaround 6)
            str(self.install_dir / "hmr.patch.yml"),
            "--no-open",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
        ]
        env, handed = self.env(), ()
        if self.plugin_token is not None:
            handed = (token_pipe(self.plugin_token),)
            env[TOKEN_FD_VARIABLE] = str(handed[0])  # pass_fds keeps the number in the child
        try:
            with open(self.log_path, "wb") as log:
                self.process = subprocess.Popen(
                    command,
                    cwd=self.home,  # the host's cwd is the default session cwd, and its ./.env is read
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    pass_fds=handed,
                    start_new_session=True,  # its own process group (PGID == PID), stopped as a whole
                )
        finally:
            for fd in handed:
                os.close(fd)  # DSH holds its own copy; the plugin reads it and closes that
        try:
            self._wait_ready(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        url_port = None
        while True:
            if not self.running():
                raise AssertionError(f"DSH exited during boot (code {self.process.returncode}):\n{self.log()}")
            if url_port is None and (match := _URL_LINE.search(self.log_path.read_bytes())):
                url_port = int(match[2])
                assert self.port in (0, url_port), f"asked for port {self.port}, DSH says {match[1].decode()}"
                self.port = url_port
            if url_port is not None and self._answers():
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"DSH did not answer host.describe within {timeout}s:\n{self.log()}")
            time.sleep(0.1)

    def _answers(self) -> bool:
        try:
            return self.rpc("host.describe", {}, timeout=2).get("ok") is True
        # Not up yet: refused, reset or timed out (URLError is an OSError), a bad status line, half-written
        # JSON, or a carrier error from a server still booting.
        except (OSError, http.client.HTTPException, ValueError, KeyError, AssertionError):
            return False

    def stop(self, timeout: float = 10) -> None:
        """SIGTERM the host by its PID, wait up to `timeout` s, then SIGKILL its process group (and
        anything it left in the group, e.g. a tool call's child). Idempotent."""
        process = self.process
        if process is None or self.stopped:
            return
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)  # the Popen is not reaped yet: the PID is still ours
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        # The group outlives its leader only while a member lives, so its id cannot be anyone else's.
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait(10)
        self.stopped = True

    def restart(self, timeout: float = 60) -> DshHost:
        """Stop, then start again on the same port and DSH_HOME: the sessions stay (persisted) and
        become cold (no live agent in the new process)."""
        self.stop()
        return self.start(timeout)

    def log(self, tail: int = 20_000) -> str:
        """The current start's output (the last `tail` characters)."""
        if self.log_path is None or not self.log_path.exists():
            return ""
        return self.log_path.read_text(errors="replace")[-tail:]

    # -- the HTTP API (DSH-HOST.md §3) ---------------------------------------------------------------

    def rpc(self, method: str, payload: dict | None = None, rpc_id: str | None = None, timeout: float = 10) -> dict:
        """POST /api/<method>; returns the `result` object: {"ok": true, "value": ...} or
        {"ok": false, "error": {"code", "message", "details"}}. A carrier error (4xx/5xx with a
        plain-text body) raises AssertionError with its status and body."""
        body = {
            "type": "client-request",
            "rpcId": rpc_id if rpc_id is not None else f"test-{uuid.uuid4()}",
            "method": method,
            "payload": payload if payload is not None else {},
        }
        request = urllib.request.Request(
            f"{self.url}/api/{method}",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                answer = json.load(response)
        except urllib.error.HTTPError as exc:
            raise AssertionError(f"DSH {method}: HTTP {exc.code} {exc.read().decode(errors='replace')!r}") from None
        assert answer.get("rpcId") == body["rpcId"], answer
        return answer["result"]

    def call(self, method: str, payload: dict | None = None, rpc_id: str | None = None, timeout: float = 10):
        """rpc(), but returns the value and fails the test on {"ok": false}."""
        result = self.rpc(method, payload, rpc_id, timeout)
        assert result.get("ok") is True, f"DSH {method} {payload!r}: {result}"
        return result["value"]

    # -- reads tests often need ----------------------------------------------------------------------

    def sessions(self) -> dict[str, dict]:
        """session.list, by session ID."""
        return {item["sessionId"]: item for item in self.call("session.list")["items"]}

    def attached(self, session_id: str) -> bool:
        """True when the session has a live agent in this process (idle or running), false when cold
        or unknown: subagent.list's parentAvailable (DSH-HOST.md §7), a read that attaches nothing."""
        return self.call("subagent.list", {"parentSessionId": session_id})["parentAvailable"]

    def history(self, session_id: str) -> list[dict]:
        """Every event of the session's log, oldest first (all pages of session.history)."""
        events: list[dict] = []
        before = None
        while True:
            payload = {"sessionId": session_id, "maxMessages": 200}
            if before is not None:
                payload["beforeSeq"] = before
            page = self.call("session.history", payload)
            batch = [entry["event"] for entry in page["events"]]
            events[:0] = batch
            if not page["hasMore"] or not batch:
                return events
            before = min(event["seq"] for event in batch)

    def user_messages(self, session_id: str, rpc_id: str | None = None) -> list[dict]:
        """The `user/message` events a client sent (source.kind "user"), optionally only those whose
        session.prompt carried `rpc_id` (data.source.rpcId)."""
        return [
            event
            for event in self.history(session_id)
            if event["type"] == "user/message"
            and event["data"].get("source", {}).get("kind") == "user"
            and (rpc_id is None or event["data"]["source"].get("rpcId") == rpc_id)
        ]

    def loop_messages(self, session_id: str, key: str | None = None) -> list[dict]:
        """The `user/message` events dshloop's plugin delivered (source.kind "plugin", plugin
        "dshloop"), optionally only the one carrying occurrence `key` (data.source.deliveryKey)."""
        return [
            event
            for event in self.history(session_id)
            if event["type"] == "user/message"
            and event["data"].get("source", {}).get("plugin") == "dshloop"
            and event["data"]["source"].get("kind") == "plugin"
            and (key is None or event["data"]["source"].get("deliveryKey") == key)
        ]
