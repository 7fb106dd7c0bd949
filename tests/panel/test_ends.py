"""contract §16 in the panel and the admin: where a loop ends, on its edit form (saved through the
same PATCH input, only what changed, a refusal on its field), on its page, and in the admin (a
read-only fieldset, and an action with its own form that edits through loop_edit)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.admin.utils import quote
from django.urls import reverse
from django.utils import timezone

from loops.models import Loop, LoopEvent, LoopState

from .test_create import field_errors
from .test_operate import edit, flash_admin, fresh

pytestmark = pytest.mark.django_db


def local_text(moment) -> str:
    return timezone.localtime(moment).strftime("%Y-%m-%dT%H:%M:%S")


def test_the_edit_form_sets_and_clears_where_a_loop_ends(staff_client, make_loop):
    loop = make_loop("Check the deployment")
    html = staff_client.get(f"/panel/loops/{loop.loop_id}/edit").content.decode()
    assert 'type="datetime-local"' in html and 'name="max_runs"' in html and "0 so far" in html

    end = (timezone.now() + timedelta(days=14)).replace(microsecond=0)
    response = edit(staff_client, loop, ends_at=local_text(end), max_runs="5")
    assert response.status_code == 302, field_errors(response, "ends_at") + field_errors(response, "max_runs")
    saved = fresh(loop)
    assert (saved.ends_at, saved.max_runs, saved.revision) == (end, 5, 2)
    event = LoopEvent.objects.filter(loop_id=loop.loop_id, kind="edited").get()
    assert set(event.changes) == {"ends_at", "max_runs"}

    # Shown on its page; the same values sent back change nothing; empty clears them.
    page = staff_client.get(f"/panel/loops/{loop.loop_id}/").content.decode()
    assert 'id="loop-ends"' in page and "after 5 delivered scheduled runs" in page
    assert edit(staff_client, saved, ends_at=local_text(end), max_runs="5").status_code == 302
    assert fresh(loop).revision == 2
    assert edit(staff_client, saved, ends_at="", max_runs="").status_code == 302
    assert (fresh(loop).ends_at, fresh(loop).max_runs, fresh(loop).revision) == (None, None, 3)


def test_the_count_towards_the_end_says_it_counts_scheduled_runs_only(staff_client, make_loop):
    # runs_delivered counts the schedule's own delivered runs: with two Run now runs among five
    # delivered, the page must not read "3 delivered so far" as if two deliveries were lost.
    loop = make_loop("Check the deployment")
    Loop.objects.filter(loop_id=loop.loop_id).update(max_runs=10, runs_delivered=3)
    page = staff_client.get(f"/panel/loops/{loop.loop_id}/").content.decode()
    assert "3 scheduled runs delivered so far; Run now and Retry do not count" in page
    assert "3 delivered so far" not in page
    assert "{#" not in page and "#}" not in page  # a template comment over two lines would be shown


def test_a_passed_end_is_refused_on_its_field(staff_client, make_loop):
    loop = make_loop("Check the deployment")
    past = timezone.now() - timedelta(hours=1)
    response = edit(staff_client, loop, ends_at=local_text(past))
    assert response.status_code == 422
    assert any("has already passed" in error for error in field_errors(response, "ends_at"))
    response = edit(staff_client, loop, max_runs="0")
    assert response.status_code == 422
    assert field_errors(response, "max_runs")
    assert fresh(loop).revision == 1


def test_the_admin_sets_where_selected_loops_end_through_the_service(staff_client, make_loop):
    a, b = make_loop("a"), make_loop("b")
    ids = [a.loop_id, b.loop_id]
    form = staff_client.post("/admin/loops/loop/", {"action": "set_ends_selected", "_selected_action": ids})
    assert form.status_code == 200 and 'name="max_runs"' in form.content.decode()

    response = staff_client.post(
        "/admin/loops/loop/",
        {"action": "set_ends_selected", "_selected_action": ids, "apply": "1", "max_runs": "3", "ends_at": ""},
        follow=True,
    )
    assert flash_admin(response) == ["Set where it ends on 2 loops."]
    assert {fresh(x).max_runs for x in (a, b)} == {3}
    assert LoopEvent.objects.filter(loop_id=a.loop_id, kind="edited", actor_kind="user").exists()
    # The admin quotes "_" in its URLs: a loop_22… by hand would name loop" (no such loop).
    change = staff_client.get(reverse("admin:loops_loop_change", args=[quote(a.loop_id)])).content.decode()
    assert "Runs delivered" in change

    # A bound already passed is refused per loop, with the service's words.
    past = local_text(timezone.now() - timedelta(hours=1))
    response = staff_client.post(
        "/admin/loops/loop/",
        {"action": "set_ends_selected", "_selected_action": [a.loop_id], "apply": "1", "ends_at": past},
        follow=True,
    )
    assert any("has already passed" in message for message in flash_admin(response))
    assert fresh(a).state == LoopState.SCHEDULED and Loop.objects.get(loop_id=a.loop_id).ends_at is None
