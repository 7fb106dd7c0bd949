"""The panel's Approve action (contract §14): a `new` loop an agent made while
DSHLOOP_APPROVE_AGENT_NEW_LOOPS is on shows Approve instead of Resume, and approving it records the
staff user's approval."""

from __future__ import annotations

from django.test import Client

from loops.models import Loop, LoopState
from tests.loops.test_approval import create, events


def test_the_panel_offers_approve_and_records_the_staff_users_approval(api, settings, staff_client: Client):
    settings.DSHLOOP_APPROVE_AGENT_NEW_LOOPS = True
    loop_id = create(api)["loop_id"]
    page = staff_client.get(f"/panel/loops/{loop_id}/").content.decode()
    assert 'data-action="approve"' in page and 'data-action="resume"' not in page
    response = staff_client.post(f"/panel/loops/{loop_id}/resume", {"next": f"/panel/loops/{loop_id}/"}, follow=True)
    assert response.status_code == 200
    assert f"Approved {loop_id}" in response.content.decode()
    assert events(loop_id)[-1] == ("approved", "user", "ada")
    assert Loop.objects.get(loop_id=loop_id).state == LoopState.SCHEDULED
