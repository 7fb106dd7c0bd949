"""API tokens (contract §1, §2): hashed at rest, scoped, revocable, made by create_api_token."""

from __future__ import annotations

import hashlib
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from tests.conftest import ApiClient, error_of
from tokens.models import ApiToken
from tokens.services import token_authenticate, token_create

TOOLS_PATH = "/api/tools"
HOST_PATH = "/api/host/sessions/ses_x"


def create_api_token(*args: str) -> tuple[str, list[str]]:
    """Run the command; return the last line of stdout and all of its lines."""
    out = StringIO()
    call_command("create_api_token", *args, stdout=out)
    lines = out.getvalue().splitlines()
    return lines[-1], lines


def status_of(token: str, path: str) -> int:
    return ApiClient(token).get(path).status_code


# --- storage ----------------------------------------------------------------------------------


def test_token_is_stored_only_as_a_hash(db):
    token, raw = token_create(name="agent", scopes=["tools"])
    stored = ApiToken.objects.get(pk=token.pk)
    assert stored.key_hash == hashlib.sha256(raw.encode()).hexdigest()
    row = ApiToken.objects.filter(pk=token.pk).values().get()
    assert not any(raw in str(value) for value in row.values()), row
    assert raw.startswith(stored.prefix) and len(stored.prefix) < len(raw) // 3


def test_raw_token_appears_nowhere_in_the_database_table(db):
    _, raw = token_create(name="agent", scopes=["tools", "host"])
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT * FROM {ApiToken._meta.db_table}")
        cells = [str(cell) for row in cursor.fetchall() for cell in row]
    assert cells and not any(raw in cell for cell in cells)


def test_tokens_are_random_and_unique(db):
    raws = {token_create(name="t", scopes=["tools"])[1] for _ in range(20)}
    assert len(raws) == 20
    assert all(len(raw) >= 40 for raw in raws)


@pytest.mark.parametrize("scopes", [[], ["admin"], ["tools", "root"]])
def test_token_create_refuses_unknown_or_no_scopes(db, scopes):
    with pytest.raises(ValueError):
        token_create(name="t", scopes=scopes)
    assert not ApiToken.objects.exists()


def test_duplicate_scopes_are_stored_once(db):
    token, _ = token_create(name="t", scopes=["tools", "tools", "host"])
    assert token.scopes == ["host", "tools"]


# --- authentication ---------------------------------------------------------------------------


def test_token_authenticate_finds_the_token_by_its_raw_value(db):
    token, raw = token_create(name="t", scopes=["tools"])
    assert token_authenticate(raw) == token
    assert token_authenticate(raw + "x") is None
    assert token_authenticate(raw[:-1]) is None
    assert token_authenticate("") is None


def test_the_stored_hash_is_not_itself_a_token(db):
    token, _ = token_create(name="t", scopes=["tools"])
    assert status_of(token.key_hash, TOOLS_PATH) == 401


def test_tools_scope_opens_tools_but_not_host(db):
    _, raw = token_create(name="t", scopes=["tools"])
    assert status_of(raw, TOOLS_PATH) == 200
    response = ApiClient(raw).get(HOST_PATH)
    assert response.status_code == 403
    assert error_of(response)["code"] == "forbidden"


def test_host_scope_opens_host_but_not_tools(db):
    _, raw = token_create(name="t", scopes=["host"])
    assert status_of(raw, HOST_PATH) == 404  # authenticated: the session just does not exist
    response = ApiClient(raw).get(TOOLS_PATH)
    assert response.status_code == 403
    assert error_of(response)["code"] == "forbidden"


def test_a_token_with_both_scopes_opens_both(db):
    _, raw = token_create(name="t", scopes=["tools", "host"])
    assert status_of(raw, TOOLS_PATH) == 200
    assert status_of(raw, HOST_PATH) == 404


def test_revoked_token_is_401(db):
    token, raw = token_create(name="t", scopes=["tools", "host"])
    assert status_of(raw, TOOLS_PATH) == 200
    token.revoked = True
    token.save(update_fields=["revoked"])
    for path in (TOOLS_PATH, HOST_PATH):
        response = ApiClient(raw).get(path)
        assert response.status_code == 401
        assert error_of(response)["code"] == "unauthorized"


def test_deleted_token_is_401(db):
    token, raw = token_create(name="t", scopes=["tools"])
    token.delete()
    assert status_of(raw, TOOLS_PATH) == 401


def test_bearer_scheme_name_is_case_insensitive(db):
    _, raw = token_create(name="t", scopes=["tools"])
    response = ApiClient(None).client.get(TOOLS_PATH, headers={"Authorization": f"bearer {raw}"})
    assert response.status_code == 200


@pytest.mark.parametrize("template", ["Token {raw}", "Basic {raw}", "{raw}", "Bearer  {raw}x", "Bearer {raw} extra"])
def test_token_in_another_scheme_or_shape_is_401(db, template):
    _, raw = token_create(name="t", scopes=["tools"])
    response = ApiClient(None).client.get(TOOLS_PATH, headers={"Authorization": template.format(raw=raw)})
    assert response.status_code == 401
    assert error_of(response)["code"] == "unauthorized"


# --- manage.py create_api_token ---------------------------------------------------------------


def test_create_api_token_prints_the_token_alone_on_the_last_line(db):
    last, lines = create_api_token()
    assert last == last.strip() and " " not in last
    token = ApiToken.objects.get()
    assert token.key_hash == hashlib.sha256(last.encode()).hexdigest()
    assert all(last not in line for line in lines[:-1])  # shown once


def test_printed_token_works_as_a_bearer_token(db):
    raw, _ = create_api_token()
    response = ApiClient(raw).get(TOOLS_PATH)
    assert response.status_code == 200
    assert len(response.json()["tools"]) == 5


def test_create_api_token_defaults_to_the_tools_scope(db):
    raw, _ = create_api_token()
    assert ApiToken.objects.get().scopes == ["tools"]
    assert status_of(raw, TOOLS_PATH) == 200
    assert status_of(raw, HOST_PATH) == 403


def test_create_api_token_host_scope_only(db):
    raw, _ = create_api_token("--scope", "host")
    assert ApiToken.objects.get().scopes == ["host"]
    assert status_of(raw, TOOLS_PATH) == 403
    assert status_of(raw, HOST_PATH) == 404


def test_create_api_token_with_both_scopes(db):
    raw, _ = create_api_token("--name", "both", "--scope", "host", "--scope", "tools")
    token = ApiToken.objects.get()
    assert (token.name, sorted(token.scopes)) == ("both", ["host", "tools"])
    assert status_of(raw, TOOLS_PATH) == 200
    assert status_of(raw, HOST_PATH) == 404


def test_create_api_token_names_the_token(db):
    create_api_token("--name", "ci-agent")
    assert ApiToken.objects.get().name == "ci-agent"


def test_create_api_token_each_run_makes_a_new_token(db):
    first, _ = create_api_token()
    second, _ = create_api_token()
    assert first != second
    assert ApiToken.objects.count() == 2


@pytest.mark.parametrize("args", [("--scope", "admin"), ("--name", "x" * 101), ("--name", "")])
def test_create_api_token_refuses_bad_arguments_without_creating(db, args):
    with pytest.raises(CommandError):
        create_api_token(*args)
    assert not ApiToken.objects.exists()
