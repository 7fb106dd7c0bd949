"""contract §14 in headless Chromium: on a `new` loop's edit form, set its overlap to skip and type a
workspace (the embedded host lists none, so the menu offers the host default or a typed directory),
first a refused one, shown on its field, then a good one; the loop's row is one revision further."""

from __future__ import annotations

import pytest

from loops.models import LoopEvent
from tests.conftest import create_loop, every

from .conftest import Page, log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def shown(page: Page, css: str) -> bool:
    return page.find(css).is_displayed()


def test_edit_a_new_loops_overlap_and_workspace(page, settings):
    settings.DSHLOOP_MIN_NEW_INTERVAL_SECONDS = 0
    loop = create_loop(every(3600), prompt="Sweep the reports", target="new")
    log_in(page)
    page.go(f"/panel/loops/{loop.loop_id}/")
    assert page.find("#loop-workspace").text == "host default"
    assert page.find("#loop-overlap").text == "Start another run (allow)"
    page.submit('.page-head [data-action="edit"]')

    # The §14 fields go with the `new` target; the typed directory with "Another directory…".
    assert shown(page, "#unattended") and not shown(page, '[name="workspace_other"]')
    page.choose("target", "session")
    assert not shown(page, "#unattended")
    page.choose("target", "new")
    assert shown(page, "#unattended")

    page.choose("overlap", "skip")
    page.select("workspace", "other")
    page.wait(lambda d: shown(page, '[name="workspace_other"]'), "the directory field did not appear")
    page.type("workspace_other", "srv/reports")
    page.submit("#save-loop")
    error = page.find("#id_workspace_other-errors").text
    assert error.startswith("'workspace' must be an absolute directory path"), error
    assert page.find('input[name="overlap"][value="skip"]').is_selected()  # the person's values stay
    assert page.find('[name="workspace_other"]').get_attribute("aria-invalid") == "true"

    page.type("workspace_other", "/srv/reports")
    page.submit("#save-loop")
    assert page.path == f"/panel/loops/{loop.loop_id}/"
    assert page.find(".messages").text == f"Saved {loop.loop_id} as revision 2."
    assert page.find("#loop-workspace").text == "/srv/reports"
    assert page.find("#loop-overlap").text == "Skip while the last run is still running (skip)"

    loop.refresh_from_db()
    assert (loop.overlap, loop.workspace, loop.permission_preset, loop.revision) == (
        "skip",
        "/srv/reports",
        "read-only",
        2,
    )
    event = LoopEvent.objects.get(loop_id=loop.loop_id, kind="edited")
    assert event.changes == {"workspace": ["", "/srv/reports"], "overlap": ["allow", "skip"]}
    assert (event.actor_kind, event.actor_id) == ("user", "ada")

    # Opened again, the form shows the loop as it is now: its workspace chosen in the menu.
    page.go(f"/panel/loops/{loop.loop_id}/edit")
    assert page.find('select[name="workspace"] option[value="/srv/reports"]').is_selected()
    assert not shown(page, '[name="workspace_other"]')
