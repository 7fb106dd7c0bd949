"""A token a DSH plugin made and handed to the dshloop it runs (`serve --plugin-token-fd`): only its
hash is kept, it becomes the plugin's one token, and a value too weak to be a token is refused."""

from __future__ import annotations

import os

import pytest

from dshloop.management.commands.serve import read_descriptor
from tokens.models import PLUGIN_SCOPES, PLUGIN_TOKEN_NAME, ApiToken
from tokens.services import plugin_token_adopt, token_authenticate, token_create

pytestmark = pytest.mark.django_db

HANDED = "dsh_" + "A" * 20 + "-" * 3 + "b" * 20
AGAIN = "dsh_" + "z" * 43


def test_a_handed_over_token_becomes_the_plugins_only_token_stored_as_a_hash():
    earlier, _ = token_create(name=PLUGIN_TOKEN_NAME, scopes=PLUGIN_SCOPES)
    other, _ = token_create(name="ci", scopes=["tools"])
    assert plugin_token_adopt(raw=HANDED, scopes=PLUGIN_SCOPES) == 1
    token = token_authenticate(HANDED)
    assert token is not None and token.name == PLUGIN_TOKEN_NAME and sorted(token.scopes) == ["manage", "tools"]
    assert HANDED not in str(list(ApiToken.objects.values()))
    earlier.refresh_from_db()
    other.refresh_from_db()
    assert earlier.revoked and not other.revoked

    # The same DSH restarting its dshloop hands the same token over: it stays the one in force.
    assert plugin_token_adopt(raw=HANDED, scopes=PLUGIN_SCOPES) == 0
    assert token_authenticate(HANDED) is not None
    # Another DSH's: the first stops working.
    assert plugin_token_adopt(raw=AGAIN, scopes=PLUGIN_SCOPES) == 1
    assert token_authenticate(HANDED) is None and token_authenticate(AGAIN) is not None


@pytest.mark.parametrize("raw", ["", "dsh_short", "x" * 47, "dsh_" + "a" * 42 + "!"])
def test_a_value_that_is_not_a_fresh_tokens_shape_is_refused(raw):
    with pytest.raises(ValueError, match="43 URL-safe characters"):
        plugin_token_adopt(raw=raw, scopes=PLUGIN_SCOPES)
    assert not ApiToken.objects.exists()


def test_serve_reads_the_token_from_its_descriptor_and_closes_it():
    read_end, write_end = os.pipe()
    os.write(write_end, f"{HANDED}\n".encode())
    os.close(write_end)
    assert read_descriptor(read_end) == HANDED
    with pytest.raises(OSError):
        os.fstat(read_end)  # closed: no child of serve inherits it
