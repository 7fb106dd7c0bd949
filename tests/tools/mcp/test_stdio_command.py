"""`manage.py mcp --session <id>`: the stdio transport's command line."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.processes import MANAGE
from tests.tools.mcp.conftest import child_env

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize(
    "session_id, words",
    [
        ("self", "reserved"),
        (" ses_padded", "whitespace"),
    ],
)
def test_mcp_refuses_a_session_that_no_session_can_be(session_id, words):
    done = subprocess.run(
        [sys.executable, str(MANAGE), "mcp", "--session", session_id],
        env=child_env(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "--session" in done.stderr and words in done.stderr, done.stderr
    assert done.stdout == ""  # stdout is the protocol channel: nothing else is ever written there


def test_mcp_ends_when_the_client_closes_stdin():
    done = subprocess.run(
        [sys.executable, str(MANAGE), "mcp", "--session", "ses_caller"],
        env=child_env(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
