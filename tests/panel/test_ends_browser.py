"""contract §16 in headless Chromium: a loop's edit form shows where it ends (an end set earlier
filled in, in the host's zone), a limit typed and saved through the real form, and the loop's page
says where it ends. The screenshots of the form (desktop, phone) are docs/screenshots/edit-ends*.png
with DSHLOOP_SCREENSHOTS=1. Engine-independent: on the SQLite pass only."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.conf import settings as django_settings
from django.utils import timezone

from core.timeutil import to_ms
from loops.events import Actor
from loops.models import ActorKind, Loop
from loops.schemas import LoopPatchIn
from loops.services import edit
from tests.conftest import create_loop, every

from .conftest import log_in

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        getattr(django_settings, "POSTGRES_PASS", False),
        reason="engine-independent (a browser): runs on the SQLite pass",
    ),
]


def test_set_where_a_loop_ends_on_its_edit_form(page, screenshot_dir):
    loop = create_loop(every(86400), prompt="Check the nightly backup report", target="ses_a")
    end = (timezone.now() + timedelta(days=14)).replace(hour=18, minute=0, second=0, microsecond=0)
    patch = LoopPatchIn.model_validate({"name": "Backup check, two weeks", "ends_at": to_ms(end)})
    edit.loop_edit_from(loop.loop_id, patch, actor=Actor(ActorKind.USER, "ada"))
    log_in(page)
    page.go(f"/panel/loops/{loop.loop_id}/edit")
    shown = page.find('[name="ends_at"]').get_attribute("value")
    # Chromium reads whole minutes back without their ":00" seconds.
    assert shown == timezone.localtime(end).strftime("%Y-%m-%dT%H:%M")
    page.type("max_runs", "10")
    page.driver.execute_script("document.activeElement.blur()")  # a focused field leaves the page below it unpainted
    shots = [page.shoot(screenshot_dir / "edit-ends.png", width=1000)]
    shots.append(page.shoot(screenshot_dir / "edit-ends-phone.png", width=390, mobile=True, max_height=2600))
    page.submit("#save-loop")

    saved = Loop.objects.get(loop_id=loop.loop_id)
    assert (saved.max_runs, saved.ends_at, saved.revision) == (10, end, 3)
    page.go(f"/panel/loops/{loop.loop_id}/")
    ends = page.find("#loop-ends").text
    assert "after 10 delivered scheduled runs" in ends and "runs_delivered" not in ends  # no template text shows
    for shot in shots:
        data = shot.read_bytes()
        assert data.startswith(b"\x89PNG") and 5_000 < len(data) < 800_000, (shot, len(data))
