"""The management commands `make run-dsh` relies on, without DSH (fast suite)."""

from __future__ import annotations

import re
from io import StringIO

import pytest
from django.core.management import call_command

from tokens.models import ApiToken
from tokens.services import token_authenticate, token_create

pytestmark = pytest.mark.django_db


def plugin_token() -> str:
    out = StringIO()
    call_command("dsh_plugin_token", stdout=out, stderr=StringIO())
    printed = out.getvalue()
    assert re.fullmatch(r"dsh_[A-Za-z0-9_-]{43}\n", printed), printed  # the token and nothing else
    return printed.strip()


def test_each_launch_gets_a_fresh_plugin_token_on_stdout_and_the_earlier_ones_stop_working(tmp_path):
    other, _ = token_create(name="ci", scopes=["tools"])
    first = plugin_token()
    assert sorted(token_authenticate(first).scopes) == ["manage", "tools"]

    second = plugin_token()
    assert second != first and sorted(token_authenticate(second).scopes) == ["manage", "tools"]
    assert token_authenticate(first) is None  # revoked: a copy that leaked stops working
    assert ApiToken.objects.get(pk=other.pk).revoked is False  # other tokens are not the plugin's
    assert list(tmp_path.iterdir()) == []  # nothing kept at rest (it writes no file at all)


def test_bootstrap_on_dsh_goes_on_when_dsh_is_down(settings):
    settings.DSHLOOP_HOST, settings.DSHLOOP_DSH_URL = "dsh", "http://127.0.0.1:9"  # nothing listens
    settings.DSHLOOP_GLOBAL_SESSION_ID, settings.DSHLOOP_HOST_TIMEOUT_SECONDS = "dshloop-global", 2
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    out, err = StringIO(), StringIO()
    call_command("bootstrap", stdout=out, stderr=err)
    assert "API token created" in out.getvalue()  # the rest of the set-up happened
    assert "The global interface session was not made (DSH is unreachable at http://127.0.0.1:9" in err.getvalue()

    out, err = StringIO(), StringIO()
    call_command("bootstrap", "--without-host", stdout=out, stderr=err)
    assert err.getvalue() == ""
