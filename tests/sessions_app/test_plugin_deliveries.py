"""What DSH's plugin reads before it delivers (contract §15; docs/dsh.md, "The trust boundary"): the
message the `dsh` host offers under an occurrence key, only while its call to the plugin is in
flight, and only to a token with scope `manage` (the plugin's). The real channel and plugin:
tests/dsh_plugin/test_channel_forgery.py."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from sessions_app.models import PluginDelivery
from sessions_app.services import plugin_delivery_offered
from tests.conftest import ApiClient
from tokens.services import token_create

OFFER = {
    "sessionId": "ses_a",
    "text": "<loop>…</loop>",
    "key": "loop_1@1000",
    "summary": "Check",
    "loop": {"loop_id": "loop_1", "run_id": "run_1"},
    "unattended": True,
    "notice": False,
    "extraTools": ["todo_write"],
}
PATH = "/api/dsh/deliveries/loop_1@1000"


@pytest.fixture
def plugin(db) -> ApiClient:
    return ApiClient(token_create(name="dsh-plugin", scopes=["tools", "manage"])[1])


def test_a_delivery_is_offered_only_while_its_call_is_in_flight(plugin):
    assert plugin.get(PATH).status_code == 404
    with plugin_delivery_offered(key="loop_1@1000", session_id="ses_a", request=OFFER):
        answer = plugin.get(PATH)
        assert answer.status_code == 200 and answer.json() == OFFER  # what else the host offers passes through
        assert plugin.get("/api/dsh/deliveries/loop_1@2000").status_code == 404
    assert plugin.get(PATH).status_code == 404
    assert not PluginDelivery.objects.exists()


def test_an_offer_is_withdrawn_when_its_call_fails_and_a_stale_one_is_not_served(plugin):
    with pytest.raises(RuntimeError), plugin_delivery_offered(key="loop_1@1000", session_id="ses_a", request=OFFER):
        raise RuntimeError("DSH did not answer")
    assert plugin.get(PATH).status_code == 404
    # One a killed scheduler left behind.
    PluginDelivery.objects.create(
        key="loop_1@1000", session_id="ses_a", request=OFFER, created_at=timezone.now() - timedelta(hours=1)
    )
    assert plugin.get(PATH).status_code == 404
    with plugin_delivery_offered(key="loop_1@1000", session_id="ses_a", request=OFFER):  # the re-drive
        assert plugin.get(PATH).status_code == 200


def test_only_a_manage_token_reads_an_offer(db):
    agent = ApiClient(token_create(name="agent", scopes=["tools"])[1])
    with plugin_delivery_offered(key="loop_1@1000", session_id="ses_a", request=OFFER):
        assert agent.get(PATH).status_code == 403
        assert ApiClient(None).get(PATH).status_code == 401
