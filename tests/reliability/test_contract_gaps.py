"""Contract points the API fuzzer (test_api_fuzz.py) probes at random, pinned as plain tests: a 405
carries the error body, and a prompt the delivered XML cannot carry is refused."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from core.timeutil import from_ms
from scheduler.claims import claim_due
from scheduler.delivery import deliver_runs
from tests.conftest import error_of


@pytest.mark.parametrize(
    "method,path",
    [
        ("PATCH", "/api/health"),
        ("DELETE", "/api/tools/loop_create"),
        ("GET", "/api/tools/loop_list"),
        ("POST", "/api/loops/loop_x/runs"),
        ("DELETE", "/api/host/sessions/ses_caller"),
    ],
)
def test_unsupported_method_answers_with_the_error_body(api, method, path):
    """contract §3: every 4xx from /api/ carries {"error": {"code", "message"}} as JSON."""
    response = getattr(api.client, method.lower())(path, headers=api.headers())
    assert response.status_code == 405
    assert response["Content-Type"].startswith("application/json"), response.content[:200]
    error_of(response)


@pytest.mark.parametrize("prompt", ["page\x0cbreak", "bell\x07", "escape \x1b[0m", "noncharacter \uffff"])
def test_an_accepted_prompt_round_trips_through_the_delivered_xml(api, host, prompt):
    """contract §7: parsing the delivered message gives back the prompt byte for byte — so a prompt
    that cannot be delivered that way must be refused at loop_create (422), not accepted."""
    response = api.tool("loop_create", {"prompt": prompt, "schedule": {"kind": "after", "after_seconds": 5}})
    if response.status_code == 422:
        assert error_of(response)["field"] == "prompt"
        return
    assert response.status_code == 200, response.content
    due = from_ms(response.json()["next_at"])
    deliver_runs(claim_due(now=due), now=due)
    [message] = host.messages("ses_caller")
    assert ET.fromstring(message["text"]).findtext("prompt") == prompt
