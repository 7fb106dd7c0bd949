"""The create form: each schedule kind and target through services.loop_create, errors inline with
the contract's messages on the field they concern (spec §8.2 creation controls)."""

from __future__ import annotations

import re

import pytest

from loops.models import Loop

pytestmark = pytest.mark.django_db


def form(**fields) -> dict:
    data = {
        "prompt": "Check the deployment",
        "target": "self",
        "kind": "every",
        "every_amount": "10",
        "every_unit": "60",
        "after_amount": "30",
        "after_unit": "60",
        "cron_expr": "",
        "tz": "",
        "session": "",
        "preset": "",
    }
    data.update(fields)
    return data


def create(client, query: str = "", **fields):
    response = client.post("/panel/new" + query, form(**fields))
    return response


def only_loop() -> Loop:
    (loop,) = Loop.objects.all()
    return loop


def field_errors(response, field: str) -> list[str]:
    html = response.content.decode()
    match = re.search(rf'<ul class="field-errors" id="id_{field}-errors">(.*?)</ul>', html, re.S)
    return re.findall(r"<li>(.*?)</li>", match.group(1)) if match else []


def test_every_to_self(staff_client, world):
    response = create(staff_client, every_amount="10", every_unit="60")
    assert response.status_code == 302
    loop = only_loop()
    assert (loop.kind, loop.every_seconds, loop.session_id, loop.preset) == ("every", 600, "self", "")
    # contract §2: a loop created from the panel records the global interface session.
    assert loop.created_by_session_id == "ses_global"
    assert response["Location"] == f"/panel/?created={loop.loop_id}#{loop.loop_id}"
    page = staff_client.get(response["Location"]).content.decode()
    assert f"Created {loop.loop_id} — every 10 minutes, next run" in page


def test_after_to_new_with_a_preset(staff_client, world):
    assert (
        create(
            staff_client, target="new", preset="reviewer", kind="after", after_amount="2", after_unit="3600"
        ).status_code
        == 302
    )
    loop = only_loop()
    assert (loop.kind, loop.after_seconds, loop.session_id, loop.preset) == ("after", 7200, "new", "reviewer")


def test_cron_to_an_existing_session_in_a_zone(staff_client, world):
    assert (
        create(
            staff_client, target="session", session="ses_b", kind="cron", cron_expr="30 9 * * 1-5", tz="Asia/Shanghai"
        ).status_code
        == 302
    )
    loop = only_loop()
    assert (loop.kind, loop.cron_expr, loop.tz, loop.session_id) == ("cron", "30 9 * * 1-5", "Asia/Shanghai", "ses_b")


def test_cron_in_the_host_time_zone_stores_no_tz(staff_client, world):
    assert create(staff_client, kind="cron", cron_expr="@daily", tz="").status_code == 302
    assert only_loop().tz == ""


def test_the_current_session_when_the_panel_is_opened_for_one(staff_client, world):
    page = staff_client.get("/panel/new?session=ses_a").content.decode()
    assert "This session — Release review" in page
    assert 'value="current"' in page and re.search(r'value="current"[^>]*checked', page)
    response = create(staff_client, "?session=ses_a", target="current")
    assert response.status_code == 302
    loop = only_loop()
    assert loop.session_id == "ses_a" and loop.created_by_session_id == "ses_global"
    assert response["Location"].startswith("/panel/?session=ses_a&created=")


def test_stale_fields_of_other_choices_are_ignored(staff_client, world):
    # The preset select is only shown for `new`; a value left in it must not reach the service.
    assert (
        create(staff_client, target="self", preset="reviewer", cron_expr="garbage", session="ses_b").status_code == 302
    )
    loop = only_loop()
    assert (loop.session_id, loop.preset, loop.kind) == ("self", "", "every")


def test_the_picker_lists_sessions_by_title_with_the_id_as_fallback(staff_client, world):
    page = staff_client.get("/panel/new").content.decode()
    assert '<option value="ses_a">Release review · ses_a (running)</option>' in page
    assert '<option value="ses_b">Nightly data sync · ses_b (cold)</option>' in page
    assert '<option value="ses_untitled">ses_untitled (idle)</option>' in page
    assert '<option value="reviewer">reviewer</option>' in page  # presets, for `new`
    assert "Global interface (self) — Interface" in page
    # spec §8.2: no model or effort controls.
    assert not re.search(r'name="[^"]*(model|effort)[^"]*"', page)


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        ({"prompt": "   "}, "prompt", "'prompt' must not be empty or only whitespace."),
        ({"every_amount": "0"}, "every_amount", "'schedule.every_seconds' must be at least 1."),
        ({"every_amount": str(2**53), "every_unit": "1"}, "every_amount", "'schedule.every_seconds' must be at most"),
        ({"every_amount": ""}, "every_amount", "'schedule.every_seconds' is required."),
        ({"kind": "after", "after_amount": "-5"}, "after_amount", "'schedule.after_seconds' must be at least 1."),
        ({"kind": "cron", "cron_expr": "61 * * * *"}, "cron_expr", "Cron expression '61 * * * *' is not valid"),
        ({"kind": "cron", "cron_expr": "0 0 30 2 *"}, "cron_expr", "Cron expression '0 0 30 2 *' never fires in UTC"),
        ({"kind": "cron", "cron_expr": "@daily", "tz": "Mars/Olympus"}, "tz", "Unknown time zone 'Mars/Olympus'"),
        ({"target": "new", "preset": "ghost"}, "preset", "Preset 'ghost' does not exist."),
        # contract §14: a fresh session at most every DSHLOOP_MIN_NEW_INTERVAL_SECONDS.
        ({"target": "new", "every_amount": "1", "every_unit": "60"}, "kind", "A loop that starts a fresh session"),
        ({"target": "session", "session": "ses_gone"}, "session", "The host knows no session 'ses_gone'"),
        ({"target": "session", "session": ""}, "session", "'session_id' must not be empty."),
    ],
)
def test_errors_carry_the_contracts_message_on_their_field(staff_client, world, fields, field, message):
    response = create(staff_client, **fields)
    assert response.status_code == 422
    errors = field_errors(response, field)
    assert errors and errors[0].replace("&#x27;", "'").startswith(message), errors
    assert not Loop.objects.exists()
    # The user's input is kept.
    html = response.content.decode()
    if fields.get("cron_expr"):
        assert f'value="{fields["cron_expr"]}"' in html


def test_self_without_a_global_interface_is_refused_with_the_contracts_message(staff_client, world):
    from sessions_app.services import session_upsert

    session_upsert(session_id="ses_global", changes={"global_interface": False})
    page = staff_client.get("/panel/new").content.decode()
    assert "There is no global interface session" in page
    response = create(staff_client, target="self")
    assert response.status_code == 422
    assert field_errors(response, "target")[0].startswith("The global interface session is unavailable")
    # Other targets are created, with no creator recorded: tests/panel/test_no_global_interface.py.
    assert create(staff_client, target="session", session="ses_a").status_code == 302


def test_a_whole_number_is_required_before_the_service_is_asked(staff_client, world):
    response = create(staff_client, every_amount="ten")
    assert response.status_code == 422
    assert field_errors(response, "every_amount") == ["Enter a whole number."]


@pytest.mark.parametrize("field", ["prompt", "cron_expr", "tz", "session", "preset", "every_amount"])
def test_nul_characters_are_refused_not_a_server_error(staff_client, world, field):
    response = create(
        staff_client,
        **{
            field: "a\x00b",
            "kind": "cron" if field in ("cron_expr", "tz") else "every",
            "target": {"session": "session", "preset": "new"}.get(field, "self"),
        },
    )
    assert response.status_code == 422
    assert not Loop.objects.exists()
