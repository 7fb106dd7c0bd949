"""Real MCP servers on the test database, driven by the SDK's own client.

stdio: each connection spawns `manage.py mcp [--session ID]`. HTTP: one uvicorn process serving
`dshloop.asgi:application` (what `manage.py serve` runs) on a free loopback port, for the whole
session. Both read the database pytest-django created, so the tests that use them are transactional.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import httpx
import httpx2
import pytest
from django.conf import settings
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from tests.processes import MANAGE, test_database_url

TRANSPORTS = ["stdio", "http"]
MODES = ["legacy", "auto"]  # the initialize handshake (today's clients) and the 2026-07-28 per-request era


def child_env() -> dict:
    """A child process on the test database and the embedded host, whatever this shell exports
    (with the test's secret key: settings refuse PostgreSQL without one)."""
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "dshloop.settings",
        "DATABASE_URL": test_database_url(),
        "DJANGO_SECRET_KEY": settings.SECRET_KEY,
        "DSHLOOP_HOST": "local",
        "PYTHONUNBUFFERED": "1",
    }


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_until_serving(url: str, process: subprocess.Popen, log: Path, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"the server exited with {process.returncode}:\n{log.read_text()}")
        try:
            # Any verdict will do (503: no scheduler runs beside this server): it answers.
            if httpx.get(f"{url}/api/health", timeout=2).status_code in (200, 503):
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"the server did not answer within {timeout}s:\n{log.read_text()}")


class HttpServer:
    """`uvicorn dshloop.asgi:application` in its own process group; its log goes to a file."""

    def __init__(self, log_dir: Path, argv: list[str] | None = None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_dir / f"http-{self.port}.log"
        self.argv = argv or [
            sys.executable,
            "-m",
            "uvicorn",
            "dshloop.asgi:application",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--lifespan",
            "on",
        ]
        self.process: subprocess.Popen | None = None

    def start(self) -> HttpServer:
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                self.argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=child_env(),
                cwd=settings.BASE_DIR,
                start_new_session=True,
            )
        wait_until_serving(self.url, self.process, self.log_path)
        return self

    def stop(self, timeout: float = 20) -> float:
        """SIGTERM, as a service manager would; returns how long the stop took."""
        started = time.monotonic()
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(10)
        return time.monotonic() - started

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


@pytest.fixture(scope="session")
def mcp_http_server(django_db_setup, tmp_path_factory):
    server = HttpServer(tmp_path_factory.mktemp("mcp-http")).start()
    yield server
    server.stop()


class Connector:
    """Opens SDK clients to one transport: `async with connect(session_id=...) as client:`."""

    def __init__(self, transport: str, *, log_dir: Path, http_url: str | None = None, token: str | None = None):
        self.transport = transport
        self.log_dir = log_dir
        self.http_url = http_url
        self.token = token

    @asynccontextmanager
    async def __call__(self, *, session_id: str | None = None, mode: str = "auto", token: str | None = None):
        if self.transport == "stdio":
            args = [str(MANAGE), "mcp"] + (["--session", session_id] if session_id is not None else [])
            params = StdioServerParameters(
                command=sys.executable, args=args, env=child_env(), cwd=str(settings.BASE_DIR)
            )
            with open(self.log_dir / f"stdio-{time.monotonic_ns()}.log", "w") as errlog:
                async with Client(stdio_client(params, errlog=errlog), mode=mode) as client:
                    yield client
            return
        headers = {"Authorization": f"Bearer {token or self.token}"}
        if session_id is not None:
            headers["X-DSH-Session-Id"] = session_id
        async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
            transport = streamable_http_client(f"{self.http_url}/mcp", http_client=http)
            async with Client(transport, mode=mode) as client:
                yield client


@pytest.fixture(params=TRANSPORTS)
def transport(request) -> str:
    return request.param


@pytest.fixture
def connect(transport, request, tmp_path, tools_token) -> Connector:
    if transport == "stdio":
        return Connector("stdio", log_dir=tmp_path)
    server = request.getfixturevalue("mcp_http_server")
    return Connector("http", log_dir=tmp_path, http_url=server.url, token=tools_token)


def run(scenario, *args):
    """Run an async scenario to completion from a (sync, database-using) test."""
    return anyio.run(scenario, *args)


def result_of(result) -> dict:
    """A successful tool result: its structured content, which the text content repeats as JSON."""
    assert not result.is_error, result
    assert len(result.content) == 1 and json.loads(result.content[0].text) == result.structured_content
    return result.structured_content


def tool_error_of(result) -> dict:
    """A tool error (isError): the contract's error object, as text and as structured content."""
    assert result.is_error, result
    body = result.structured_content
    assert len(result.content) == 1 and json.loads(result.content[0].text) == body
    assert set(body) == {"error"}, body
    error = body["error"]
    assert set(error) <= {"code", "message", "field"} and error["code"] and error["message"], error
    return error
