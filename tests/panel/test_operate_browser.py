"""Operating a loop in the panel, end to end: on one loop, in headless Chromium, with a real `runloops`
delivering, pause -> run now -> edit (prompt and name) -> resume, checking the loop's page after each
step: its state, its audit trail, and the manual run with the revision it executed."""

from __future__ import annotations

import pytest
from django.conf import settings

from loops.models import Loop, LoopEvent, LoopRun, LoopState, RunStatus
from sessions_app.models import InboxMessage
from tests.conftest import create_loop, every
from tests.processes import Schedulers, wait_for

from .conftest import Page, log_in

pytestmark = [pytest.mark.browser, pytest.mark.process, pytest.mark.django_db(transaction=True)]

DELIVERY_TIMEOUT = 30  # a manual run is delivered at once; the rest is a loaded machine's slack


@pytest.fixture
def scheduler(tmp_path):
    pool = Schedulers(tmp_path, DSHLOOP_HOST="local", DJANGO_SECRET_KEY=settings.SECRET_KEY)
    pool.start_ready()
    yield pool
    pool.close()


def events(page: Page) -> list[str]:
    return [cell.text for cell in page.all("#events .event-kind")]


def message(page: Page) -> str:
    return page.find(".messages").text


def delivered(run_id: str) -> LoopRun | None:
    return LoopRun.objects.filter(run_id=run_id, status=RunStatus.DELIVERED).first()


def click(page: Page, action: str):
    """A control of the loop's page (its head: Pause/Resume, Run now, Edit, Delete), then the next page."""
    page.submit(f'.page-head [data-action="{action}"]')


def manual_run_delivered(page: Page, loop: Loop, *, revision: int, prompt: str) -> LoopRun:
    run = LoopRun.objects.filter(loop_id=loop.loop_id, manual=True, revision=revision).get()
    wait_for(lambda: delivered(run.run_id), timeout=DELIVERY_TIMEOUT, message=f"{run.run_id} to be delivered")
    inbox = InboxMessage.objects.get(occurrence_key=run.occurrence_key)
    assert inbox.session_id == "ses_a" and prompt in inbox.text  # the prompt of the revision it ran
    page.go(f"/panel/loops/{loop.loop_id}/")
    listed = page.find(f'tr[id="{run.run_id}"]').text
    assert "delivered" in listed and f"r{revision}" in listed and "manual" in listed, listed
    return run


def test_pause_run_now_edit_resume_one_loop(page, scheduler):
    loop = create_loop(every(3600), prompt="Check the deployment", target="ses_a")
    log_in(page)
    page.go(f"/panel/loops/{loop.loop_id}/")
    assert page.find("#loop-state").text == "scheduled" and page.find("#loop-revision").text == "1"
    assert events(page) == ["Created"]

    # --- pause: at once, no confirmation; no next run while paused ----------------------------------
    click(page, "pause")
    assert page.path == f"/panel/loops/{loop.loop_id}/"
    assert message(page) == f"Paused {loop.loop_id}: it will not run until it is resumed."
    assert page.find("#loop-state").text == "paused"
    assert page.find("#pause-info").text.startswith("paused by an operator")
    assert "None: this loop will not fire again." in page.text  # no upcoming fire times while paused
    assert events(page) == ["Paused", "Created"]
    assert page.find("#events .event-actor").text == "ada"
    assert not page.all('.page-head [data-action="pause"]')

    # --- run now: asks first, then one manual run, delivered; the loop stays paused -----------------------
    click(page, "run")
    assert "Run this loop now?" in page.text and "the loop stays paused" in page.text
    page.submit("#confirm-run")
    assert page.path == f"/panel/loops/{loop.loop_id}/"
    assert message(page).startswith(f"Queued a manual run of {loop.loop_id} (run_")
    assert events(page) == ["Run now", "Paused", "Created"]
    first = manual_run_delivered(page, loop, revision=1, prompt="Check the deployment")
    assert page.find("#loop-state").text == "paused"

    # --- edit: the New loop form, filled in; a new prompt and a name --------------------------------------
    click(page, "edit")
    assert page.find('[name="prompt"]').get_attribute("value") == "Check the deployment"
    assert page.find('input[name="kind"][value="every"]').is_selected()
    assert page.find('[name="every_amount"]').get_attribute("value") == "1"
    page.type("name", "Deploy watch")
    page.type("prompt", "Check the deployment and the error budget")
    page.submit("#save-loop")
    assert page.path == f"/panel/loops/{loop.loop_id}/"
    assert message(page) == f"Saved “Deploy watch” ({loop.loop_id}) as revision 2."
    assert page.find("#loop-name").text == "Deploy watch"
    assert page.find(".detail-title").text == "Check the deployment and the error budget"
    assert page.find("#loop-revision").text == "2"
    assert events(page) == ["Edited", "Run now", "Paused", "Created"]
    changes = page.find("#events .event-edited .event-changes").text
    assert "Name none → Deploy watch" in changes
    assert "Prompt Check the deployment → Check the deployment and the error budget" in changes
    assert page.find(f'tr[id="{first.run_id}"] .run-revision').text == "r1 manual"  # history stays truthful

    # --- resume: scheduled again, the next run strictly after now ---------------------------------------
    click(page, "resume")
    assert message(page).startswith(f"Resumed “Deploy watch” ({loop.loop_id}) — next run ")
    assert page.find("#loop-state").text == "scheduled"
    assert not page.all("#pause-info")
    assert len(page.all(".upcoming li")) == 5
    assert events(page) == ["Resumed", "Edited", "Run now", "Paused", "Created"]
    resumed = Loop.objects.get(loop_id=loop.loop_id)
    assert (resumed.state, resumed.revision) == (LoopState.SCHEDULED, 2)
    resumed_at = LoopEvent.objects.get(loop_id=loop.loop_id, kind="resumed").at
    assert resumed.next_at > resumed_at  # nothing that fell due while paused is delivered

    # --- and a second run now executes revision 2 with its new prompt -----------------------------------
    click(page, "run")
    page.submit("#confirm-run")
    manual_run_delivered(page, loop, revision=2, prompt="Check the deployment and the error budget")
    assert all(s.running() for s in scheduler.started)
