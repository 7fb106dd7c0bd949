"""Fixtures of the loop tests that drive the operator API (contract §9, §10)."""

from __future__ import annotations

import json
from datetime import datetime

import pytest
import time_machine

from tests.conftest import T0


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
