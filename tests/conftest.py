"""Shared fixtures: an authenticated JSON client and helpers to make host sessions and presets.

The whole suite runs on SQLite and, when DSHLOOP_TEST_DATABASE_URL is set (make test does so
as a second pass with DATABASE_URL), on PostgreSQL.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections import Counter
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.conf import settings as django_settings
from django.test import Client
from django.utils import timezone
from pydantic import TypeAdapter

from core.timeutil import truncate_to_ms
from loops.events import Actor
from loops.models import Loop, LoopRun
from loops.schemas import ScheduleIn
from loops.services import create
from scheduler.claims import claim_due
from scheduler.delivery import deliver_runs
from sessions_app.services import preset_upsert, session_upsert
from tokens.services import token_create

T0 = datetime(2025, 6, 2, 10, 0, tzinfo=UTC)  # a Monday: the frozen "now" of the schedule tests


def s(seconds: float) -> timedelta:
    return timedelta(seconds=seconds)


def every(seconds: int = 10) -> dict:
    """A schedule as the tools take it (spec §3)."""
    return {"kind": "every", "every_seconds": seconds}


def after(seconds: int = 10) -> dict:
    return {"kind": "after", "after_seconds": seconds}


def create_loop(
    schedule: dict,
    *,
    target: str,
    prompt: str = "Check the deploy",
    preset: str | None = None,
    created_by: str | None = None,
    at: datetime | None = None,
) -> Loop:
    """A loop made through create.loop_create, as the tools and the panel make them; `schedule`
    as the tools take it, `created_by` defaulting to what a caller-less create records."""
    now = truncate_to_ms(at or timezone.now())
    domain = TypeAdapter(ScheduleIn).validate_python(schedule).to_schedule(host_tz=django_settings.TIME_ZONE, now=now)
    creator = create.default_creator() if created_by is None else created_by
    return create.loop_create(
        prompt=prompt,
        schedule=domain,
        target=target,
        preset=preset,
        created_by=creator,
        created_at=now,
        actor=Actor.session(creator or None),
    )


def fire_due(loop_id: str, at: datetime) -> LoopRun:
    """Claim what is due at `at` and deliver it; the loop's newest run."""
    with time_machine.travel(at, tick=False):
        run_ids = claim_due(now=at)
        assert run_ids, f"nothing was due at {at}"
        deliver_runs(run_ids, now=at)
    return LoopRun.objects.filter(loop_id=loop_id).order_by("-scheduled_at").first()


@contextmanager
def captured_log(caplog, name: str):
    """caplog, sure to see logger `name`: settings stop "dshloop" from propagating to the root
    logger, where caplog listens (pytest's logging plugin may already have attached it there)."""
    logger = logging.getLogger(name)
    attach = caplog.handler not in logging.getLogger("dshloop").handlers
    if attach:
        logger.addHandler(caplog.handler)
    try:
        yield caplog
    finally:
        if attach:
            logger.removeHandler(caplog.handler)


def pytest_report_header(config):
    from django.conf import settings

    return f"dshloop test database: {settings.DATABASES['default']['ENGINE']}"


def postgres_unavailable_reason() -> str | None:
    url = os.environ.get("DSHLOOP_TEST_DATABASE_URL")
    if not url:
        return "PostgreSQL tests need DSHLOOP_TEST_DATABASE_URL (e.g. postgresql://postgres@127.0.0.1:5432/test)"
    import psycopg

    try:
        psycopg.connect(url, connect_timeout=5).close()
    except psycopg.Error as exc:
        return f"PostgreSQL at DSHLOOP_TEST_DATABASE_URL is unreachable: {exc}".strip()
    return None


ENGINE_INDEPENDENT = pytest.mark.skip(
    reason="engine-independent (a real DSH, DSH Web, or the installed program's own SQLite): runs on the SQLite pass"
)


def skip_engine_independent(items) -> None:
    """A real DSH (its adapter, its plugin, DSH Web) and the installed program on its own SQLite do not
    depend on the test database's engine: they run on the SQLite pass only, which keeps CI's time
    for the tests that do."""
    for item in items:
        if item.get_closest_marker("dsh") or item.get_closest_marker("engine_independent"):
            item.add_marker(ENGINE_INDEPENDENT)


def pytest_collection_modifyitems(config, items):
    """The PostgreSQL pass: skip with the reason when no server is given, fail under CI."""
    from django.conf import settings

    if not getattr(settings, "POSTGRES_PASS", False):
        return
    skip_engine_independent(items)
    reason = postgres_unavailable_reason()
    if reason is None:
        return
    if os.environ.get("CI") == "true":
        pytest.exit(f"CI=true and {reason}", returncode=1)
    for item in items:
        item.add_marker(pytest.mark.skip(reason=reason))


class ApiClient:
    """A JSON client for /api/ that sends a bearer token and, optionally, the caller's session."""

    def __init__(self, token: str | None, session_id: str | None = None):
        self.client = Client()
        self.token = token
        self.session_id = session_id

    def headers(self, session_id: str | None = None) -> dict:
        headers = {}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        caller = session_id if session_id is not None else self.session_id
        if caller:
            headers["X-DSH-Session-Id"] = caller
        return headers

    def post(self, path: str, body=None, *, raw: bytes | str | None = None, session_id: str | None = None):
        data = raw if raw is not None else json.dumps(body if body is not None else {})
        return self.client.post(path, data=data, content_type="application/json", headers=self.headers(session_id))

    def put(self, path: str, body=None):
        return self.client.put(
            path, data=json.dumps(body or {}), content_type="application/json", headers=self.headers()
        )

    def get(self, path: str, **params):
        return self.client.get(path, params, headers=self.headers())

    def tool(self, name: str, body=None, *, raw: bytes | str | None = None, session_id: str | None = None):
        return self.post(f"/api/tools/{name}", body, raw=raw, session_id=session_id)

    def as_session(self, session_id: str | None) -> ApiClient:
        return ApiClient(self.token, session_id)


@pytest.fixture
def tools_token(db) -> str:
    return token_create(name="agent", scopes=["tools"])[1]


@pytest.fixture
def host_token(db) -> str:
    return token_create(name="host", scopes=["host"])[1]


class LocalTestHost:
    """The embedded host (DSHLOOP_HOST=local): sessions, presets and the inbox are database rows."""

    kind = "local"

    def put_session(self, session_id: str, **fields):
        return session_upsert(session_id=session_id, changes=fields)

    def put_preset(self, name: str, mountable: bool = True):
        return preset_upsert(name=name, mountable=mountable)

    def messages(self, session_id: str | None = None) -> list[dict]:
        from sessions_app.models import InboxMessage

        rows = InboxMessage.objects.order_by("created_at", "message_id")
        if session_id is not None:
            rows = rows.filter(session_id=session_id)
        return list(rows.values("message_id", "session_id", "text", "delivery", "occurrence_key", "source"))

    def session(self, session_id: str) -> dict | None:
        from sessions_app.models import SessionHeader

        return SessionHeader.objects.filter(session_id=session_id).values().first()

    def scheduler_env(self) -> dict:
        return {"DSHLOOP_HOST": "local"}


class HttpTestHost:
    """The reference DSH host over loopback HTTP (DSHLOOP_HOST=http), see tests/refhost.py."""

    kind = "http"

    def __init__(self, refhost):
        self.refhost = refhost

    def put_session(self, session_id: str, **fields):
        from types import SimpleNamespace

        return SimpleNamespace(**self.refhost.put_session(session_id, **fields))

    def put_preset(self, name: str, mountable: bool = True):
        self.refhost.put_preset(name, mountable)

    def messages(self, session_id: str | None = None) -> list[dict]:
        return self.refhost.messages(session_id)

    def session(self, session_id: str) -> dict | None:
        with self.refhost.lock:
            session = self.refhost.sessions.get(session_id)
            return dict(session) if session else None

    def scheduler_env(self) -> dict:
        return {"DSHLOOP_HOST": "http", "DSHLOOP_HOST_URL": self.refhost.url, "DSHLOOP_HOST_TOKEN": self.refhost.token}


def pytest_generate_tests(metafunc):
    """Tests marked `both_hosts` run against the embedded host and the HTTP reference host;
    `http_host` ones against the reference host only; the rest against the embedded host."""
    if "host_kind" in metafunc.fixturenames:
        if metafunc.definition.get_closest_marker("both_hosts"):
            kinds = ["local", "http"]
        elif metafunc.definition.get_closest_marker("http_host"):
            kinds = ["http"]
        else:
            kinds = ["local"]
        metafunc.parametrize("host_kind", kinds)


@pytest.fixture
def refhost():
    from .refhost import RefHost

    host = RefHost().start()
    yield host
    host.stop()


@pytest.fixture
def host(host_kind, db, settings, request):
    if host_kind == "local":
        return LocalTestHost()
    refhost = request.getfixturevalue("refhost")
    settings.DSHLOOP_HOST, settings.DSHLOOP_HOST_URL, settings.DSHLOOP_HOST_TOKEN = "http", refhost.url, refhost.token
    return HttpTestHost(refhost)


@pytest.fixture
def api(tools_token, host) -> ApiClient:
    """An agent calling from session ses_caller (which exists on the host)."""
    host.put_session("ses_caller", status="running", preset="coder", model="m1")
    return ApiClient(tools_token, "ses_caller")


@pytest.fixture
def host_api(host_token) -> ApiClient:
    return ApiClient(host_token)


@pytest.fixture
def manage_token(db) -> str:
    return token_create(name="ops", scopes=["manage"])[1]


@pytest.fixture
def manage_api(manage_token) -> ApiClient:
    """An operator's client for the contract §9 API (scope manage)."""
    return ApiClient(manage_token)


@pytest.fixture
def alive_scheduler(db):
    """A scheduler's heartbeat that just ticked: /api/health answers 200 (503 without one)."""
    from loops.models import SchedulerHeartbeat

    now = timezone.now()
    return SchedulerHeartbeat.objects.create(
        instance_id="test", hostname="test", pid=1, started_at=now, last_tick_at=now
    )


@pytest.fixture
def make_session(host):
    return host.put_session


@pytest.fixture
def global_session(make_session):
    return make_session("ses_global", global_interface=True, preset="interface", model="m-global")


@pytest.fixture
def make_preset(host):
    return host.put_preset


def error_of(response) -> dict:
    """The contract's error object; fails the test if the body has another shape."""
    body = response.json()
    assert set(body) == {"error"}, body
    error = body["error"]
    assert set(error) <= {"code", "message", "field"} and error["code"] and error["message"], error
    return error


@pytest.fixture
def schedulers(transactional_db, tmp_path, host):
    """Start real `runloops` processes on the test database and the test's host; all are killed at the end."""
    from .processes import Schedulers

    running = Schedulers(tmp_path, **host.scheduler_env())
    yield running
    running.close()


@pytest.fixture
def dsh(tmp_path):
    """A real DeepSeek Harness host (tests/dsh.py) with its own DSH_HOME under tmp_path, stopped by PID at
    teardown. Skipped with the reason when DSH is not installed (scripts/install-dsh.sh); under CI=true
    that fails the test instead."""
    from .dsh import DshHost, require_dsh_dir

    host = DshHost(require_dsh_dir(), tmp_path / "dsh-home").start()
    yield host
    host.stop()


@pytest.fixture
def stub_model():
    """tests/stub_model.py serving in this process: a model for real DSH turns."""
    from .stub_model import StubModel

    with StubModel() as model:
        yield model


@pytest.fixture
def modelled(tmp_path, stub_model):
    """A real DSH whose model is the stub (its base URL is read at launch)."""
    from .dsh import DshHost, require_dsh_dir

    host = DshHost(require_dsh_dir(), tmp_path / "dsh-home", env=stub_model.env()).start()
    yield host
    host.stop()


# -- the loop tests that drive the operator API (contract §9, §10) --


@pytest.fixture
def ops(manage_api):
    """POST/GET/PATCH on /api/loops/{id}[/action] at a frozen moment."""

    def call(method: str, loop_id: str, action: str = "", body: dict | None = None, *, at: datetime = T0):
        path = f"/api/loops/{loop_id}" + (f"/{action}" if action else "")
        with time_machine.travel(at, tick=False):
            if method == "GET":
                return manage_api.get(path)
            if method == "PATCH":
                return manage_api.client.patch(
                    path,
                    data=json.dumps(body or {}),
                    content_type="application/json",
                    headers=manage_api.headers(),
                )
            return manage_api.post(path, body or {})

    return call


@pytest.fixture
def make(api, make_session):
    make_session("ses_target", status="idle")

    def create(schedule: dict, *, at: datetime = T0, **body) -> dict:
        with time_machine.travel(at, tick=False):
            response = api.tool(
                "loop_create", {"prompt": "Check the deploy", "schedule": schedule, "session_id": "ses_target", **body}
            )
        assert response.status_code == 200, response.content
        return response.json()

    return create


@pytest.fixture
def dsh_calls(monkeypatch) -> Counter:
    """Every call dshloop's DSH adapter makes, by RPC method or GET path, from any thread: what a
    delivery or a look-up costs DSH's one thread."""
    from sessions_app.hosts.dsh_wire import DshClient

    calls: Counter = Counter()
    lock = threading.Lock()
    call, get = DshClient.call, DshClient.get

    def counted_call(self, method, payload, **kwargs):
        with lock:
            calls[method] += 1
        return call(self, method, payload, **kwargs)

    def counted_get(self, path, params):
        with lock:
            calls[path] += 1
        return get(self, path, params)

    monkeypatch.setattr(DshClient, "call", counted_call)
    monkeypatch.setattr(DshClient, "get", counted_get)  # session.export: a session's header
    return calls
