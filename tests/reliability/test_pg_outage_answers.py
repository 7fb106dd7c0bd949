"""What a served process answers while PostgreSQL is down, and after it is back (contract §3: 503
`unavailable`), on a private throwaway cluster (tests/pgcluster.py) so that no other run notices.

A real `uvicorn dshloop.asgi:application` (what `manage.py serve` runs) is warmed up first, so that its
threads hold persistent connections (CONN_MAX_AGE) that the stop then breaks: while the server is
down, every /api/ path and /metrics answer the contract's JSON 503 `unavailable` with Retry-After,
/mcp a JSON-RPC error carrying the same body, the panel a plain 503 page and /api/health its own
503; after the server is back, the same requests answer as before, on new connections. Nothing of
it is a bug: the log has one warning per refused request and no traceback.
"""

from __future__ import annotations

import httpx
import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import Client

from sessions_app.services import session_upsert
from tests.conftest import create_loop, every
from tests.served import Served
from tokens.services import token_create
from tools.mcp.server import UNAVAILABLE

from .test_pg_restart import private_database, private_postgres  # noqa: F401  (fixtures)

pytestmark = [
    pytest.mark.process,
    pytest.mark.django_db(transaction=True),
    # (on the PostgreSQL pass without a server, tests/conftest.py skips it with that reason)
    pytest.mark.skipif(
        not getattr(settings, "POSTGRES_PASS", False), reason="a PostgreSQL server restart needs the PostgreSQL pass"
    ),
]

LOOP_LIST = {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "loop_list", "arguments": {}}}
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "X-DSH-Session-Id": "ses_a"}


def operations(loop_id: str) -> dict[str, tuple[str, str, dict | None]]:
    """The requests the outage was seen to answer with Django's HTML 500, in an order that leaves
    each valid once the database is back (run last: it leaves a run in flight)."""
    loop = f"/api/loops/{loop_id}"
    return {
        "PATCH": ("PATCH", loop, {"name": "renamed"}),
        "pause": ("POST", f"{loop}/pause", None),
        "resume": ("POST", f"{loop}/resume", None),
        "loop": ("GET", loop, None),
        "inbox": ("GET", "/api/host/sessions/ses_a/inbox", None),
        "metrics": ("GET", "/metrics", None),
        "run": ("POST", f"{loop}/run", None),
    }


def test_while_postgresql_is_down_every_path_answers_unavailable_then_normally_once_it_is_back(
    private_postgres,  # noqa: F811
    private_database,  # noqa: F811
    tmp_path,
):
    # The world, on the private database (this process's ORM points there while the fixture lasts).
    session_upsert(session_id="ses_a", changes={"status": "idle"})
    loop_id = create_loop(every(3600), target="ses_a").loop_id
    token = token_create(name="ops", scopes=["manage", "tools", "host"])[1]
    staff = get_user_model().objects.create_user("ada", password="pw-not-secret", is_staff=True)
    browser = Client()
    browser.force_login(staff)
    auth = {"Authorization": f"Bearer {token}"}
    cookies = {settings.SESSION_COOKIE_NAME: browser.cookies[settings.SESSION_COOKIE_NAME].value}

    with Served(tmp_path / "server.log", database_url=private_database, DSHLOOP_VAR_DIR=str(tmp_path)) as served:
        http = httpx.Client(base_url=served.url, timeout=15)
        browser_http = httpx.Client(base_url=served.url, timeout=15, cookies=cookies)

        def call(name: str) -> httpx.Response:
            method, path, body = operations(loop_id)[name]
            return http.request(method, path, json=body, headers=auth)

        def mcp() -> httpx.Response:
            return http.post("/mcp", json=LOOP_LIST, headers={**auth, **MCP_HEADERS})

        def panel() -> httpx.Response:
            return browser_http.get(f"/panel/loops/{loop_id}/")

        # Warm-up: several requests of each kind, so that the server's threads hold connections.
        for _ in range(3):
            for name in ("loop", "inbox", "metrics"):
                assert call(name).status_code == 200, (name, call(name).text)
            assert mcp().status_code == 200 and panel().status_code == 200

        private_postgres.stop()  # fast: every open connection is cut
        try:
            for name in operations(loop_id):
                for _ in range(2):  # the first meets the broken connection, the next a refused one
                    down = call(name)
                    assert down.status_code == 503, (name, down.status_code, down.text[:500])
                    assert down.headers["content-type"].startswith("application/json"), (name, down.text[:500])
                    assert down.json()["error"]["code"] == "unavailable", (name, down.text)
                    assert down.headers["Retry-After"] == "5", name
            refused = mcp()
            assert refused.status_code == 503 and refused.headers["Retry-After"] == "5", refused.text
            rpc = refused.json()
            assert rpc["jsonrpc"] == "2.0" and rpc["error"]["code"] == UNAVAILABLE, rpc
            assert rpc["error"]["data"]["error"]["code"] == "unavailable", rpc
            page = panel()
            assert page.status_code == 503 and "Service unavailable" in page.text, page.text[:500]
            health = http.get("/api/health")
            assert health.status_code == 503 and health.json()["database"] == "error", health.text
        finally:
            private_postgres.start()

        # Back: the same requests answer as they would have, on new connections.
        answers = {name: call(name) for name in operations(loop_id)}
        statuses = {name: answer.status_code for name, answer in answers.items()}
        assert statuses == {name: 202 if name == "run" else 200 for name in statuses}, {
            name: answer.text[:300] for name, answer in answers.items()
        }
        assert answers["PATCH"].json()["name"] == "renamed"
        assert "dshloop_http_unexpected_errors_total 0.0" in answers["metrics"].text
        listed = mcp()
        assert listed.status_code == 200 and "result" in listed.json(), listed.text
        assert panel().status_code == 200
        assert http.get("/api/health").json()["database"] == "ok"

    log = served.log()
    assert "Traceback" not in log, log[-5000:]  # an outage is not a bug
    # One warning line per refusal, the driver's whole multi-line message on it.
    lines = log.splitlines()
    refusals = [i for i, line in enumerate(lines) if "the database is unavailable, answered 503" in line]
    assert len(refusals) >= 2 * len(operations(loop_id)) + 1, log[-5000:]
    assert not [lines[i + 1] for i in refusals if lines[i + 1].startswith("\t")], log[-5000:]
