"""The panel reaches sessions and presets only through get_host(): it works on the HTTP host too."""

from __future__ import annotations

import pytest

from loops.models import Loop

pytestmark = [pytest.mark.django_db, pytest.mark.both_hosts]


def test_create_from_the_picker_and_list_with_titles(staff_client, host):
    host.put_session("ses_ui", status="idle", global_interface=True, user_title="Global interface")
    host.put_session("ses_work", status="cold", user_title="Quarterly numbers", preset="analyst")
    host.put_preset("reviewer")
    page = staff_client.get("/panel/new").content.decode()
    assert '<option value="ses_work">Quarterly numbers · ses_work (cold)</option>' in page
    response = staff_client.post(
        "/panel/new",
        {
            "prompt": "Refresh the numbers",
            "target": "session",
            "session": "ses_work",
            "kind": "every",
            "every_amount": "2",
            "every_unit": "3600",
        },
    )
    assert response.status_code == 302
    response = staff_client.post(
        "/panel/new",
        {
            "prompt": "Review",
            "target": "new",
            "preset": "reviewer",
            "kind": "after",
            "after_amount": "5",
            "after_unit": "60",
        },
    )
    assert response.status_code == 302
    response = staff_client.post(
        "/panel/new",
        {
            "prompt": "Nope",
            "target": "new",
            "preset": "ghost",
            "kind": "after",
            "after_amount": "5",
            "after_unit": "60",
        },
    )
    assert response.status_code == 422 and "Preset &#x27;ghost&#x27; does not exist." in response.content.decode()
    assert Loop.objects.filter(created_by_session_id="ses_ui").count() == 2
    html = staff_client.get("/panel/").content.decode()
    assert "Quarterly numbers" in html and "every 2 hours" in html and "preset reviewer" in html
    html = staff_client.get("/panel/sessions/ses_work/status").content.decode()
    assert "1 loop<" in html and "Refresh the numbers" in html and "Review" not in html
