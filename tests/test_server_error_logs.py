"""A 500 in a served process, as an operator meets it: the log has the error with its traceback (in
both log formats), the client gets the contract's JSON error, and /metrics counts it.

The failure is a real one, not a test-only route: the served database lacks a table (as after a
missed migration), so every read of the embedded host's sessions fails with SQLite's "no such table"
— an OperationalError that is a bug, not an outage. Without DJANGO_DEBUG, as in production: Django's
own logging sends its request errors to mail_admins only then, so without dshloop's logging settings
a 500 would leave no line anywhere.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys

import httpx
import pytest

from tests.processes import MANAGE
from tests.served import Served

pytestmark = pytest.mark.process

MCP_HEADERS = {"Accept": "application/json, text/event-stream"}
LIST_SESSIONS = {
    "jsonrpc": "2.0",
    "id": 7,
    "method": "tools/call",
    "params": {"name": "list_sessions", "arguments": {}},
}


def manage(database_url: str, tmp_path, *args: str) -> str:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "dshloop.settings",
        "DATABASE_URL": database_url,
        "DSHLOOP_VAR_DIR": str(tmp_path / "var"),
    }
    done = subprocess.run(
        [sys.executable, str(MANAGE), *args], capture_output=True, text=True, timeout=120, env=env, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def database_without_sessions(tmp_path_factory):
    """A migrated SQLite file, a token for the tools and the metrics, then the sessions table dropped."""
    tmp_path = tmp_path_factory.mktemp("broken")
    path = tmp_path / "db.sqlite3"
    url = f"sqlite:///{path}"
    manage(url, tmp_path, "migrate", "--noinput")
    token = manage(url, tmp_path, "create_api_token", "--name", "ops", "--scope", "tools", "--scope", "manage")
    with sqlite3.connect(path) as db:
        db.execute("DROP TABLE sessions_app_sessionheader")
    return url, token.strip().splitlines()[-1]


def unexpected_errors(text: str) -> float:
    [line] = [line for line in text.splitlines() if line.startswith("dshloop_http_unexpected_errors_total ")]
    return float(line.split()[1])


@pytest.mark.parametrize("log_format", ["human", "json"])
def test_a_500_is_logged_with_its_traceback_answered_in_json_and_counted(
    database_without_sessions, tmp_path, log_format
):
    url, token = database_without_sessions
    auth = {"Authorization": f"Bearer {token}"}
    served = Served(
        tmp_path / "server.log", database_url=url, DSHLOOP_LOG_FORMAT=log_format, DSHLOOP_VAR_DIR=str(tmp_path)
    )
    with served:
        rest = httpx.post(f"{served.url}/api/tools/list_sessions", json={}, headers=auth, timeout=10)
        mcp = httpx.post(f"{served.url}/mcp", json=LIST_SESSIONS, headers={**auth, **MCP_HEADERS}, timeout=10)
        scrape = httpx.get(f"{served.url}/metrics", headers=auth, timeout=10)

    assert rest.status_code == 500 and rest.headers["content-type"].startswith("application/json"), rest.text
    error = rest.json()["error"]
    assert error["code"] == "internal_error" and "no such table" not in error["message"]  # details: the log's
    assert mcp.json()["error"]["code"] == -32603, mcp.text  # JSON-RPC internal error
    assert scrape.status_code == 200 and unexpected_errors(scrape.text) == 2.0, scrape.text

    log = served.log()
    if log_format == "json":
        records = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
        errors = [r for r in records if r["level"] == "ERROR"]
        assert [r["logger"] for r in errors] == ["dshloop.errors", "dshloop.mcp"], log
        rest_record, mcp_record = errors
        assert rest_record["message"] == "POST /api/tools/list_sessions: unexpected error, answered 500"
        assert mcp_record["message"] == "MCP tool list_sessions failed"
        for record in errors:
            assert record["exception"].startswith("Traceback (most recent call last):"), record
            assert "no such table: sessions_app_sessionheader" in record["exception"], record
    else:
        head = "ERROR dshloop.errors POST /api/tools/list_sessions: unexpected error, answered 500\nTraceback"
        assert head in log, log
        assert "ERROR dshloop.mcp MCP tool list_sessions failed\nTraceback" in log, log
        assert log.count("no such table: sessions_app_sessionheader") >= 2, log
