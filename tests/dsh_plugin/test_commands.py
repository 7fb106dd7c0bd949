"""The management commands `make run-dsh` relies on, without DSH (fast suite)."""

from __future__ import annotations

import stat
from io import StringIO

import pytest
from django.core.management import call_command

from tokens.models import ApiToken
from tokens.services import token_authenticate

pytestmark = pytest.mark.django_db


def test_the_plugin_token_is_made_once_kept_private_and_replaced_when_it_stops_working(tmp_path):
    file = tmp_path / "var" / "dsh-plugin-token"
    call_command("dsh_plugin_token", str(file), stderr=StringIO())
    first = file.read_text().strip()
    assert token_authenticate(first).scopes == ["tools"]
    assert stat.S_IMODE(file.stat().st_mode) == 0o600

    call_command("dsh_plugin_token", str(file), stderr=StringIO())
    assert file.read_text().strip() == first  # kept across runs

    ApiToken.objects.update(revoked=True)  # e.g. revoked in the admin
    call_command("dsh_plugin_token", str(file), stderr=StringIO())
    assert file.read_text().strip() != first and token_authenticate(file.read_text().strip())


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
