"""The panel without a global interface session (defect 4): `new` and existing-session loops
are still created, with no creator recorded, and a `new` loop's run inherits the profile default and
says so (spec §2.1); only `self` is refused (contract §3 target_unavailable)."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

import pytest
import time_machine

from loops.models import Loop, LoopRun, RunStatus
from scheduler.claims import claim_due
from scheduler.delivery import deliver_runs
from sessions_app.models import InboxMessage, SessionHeader
from sessions_app.services import session_upsert
from tests.conftest import T0

from .test_create import field_errors, form

pytestmark = pytest.mark.django_db

FALLBACK = "profile default preset and model (created without a source session)"


@pytest.fixture
def no_global_interface(world, settings):
    """The world of conftest, but its ses_global is no longer the global interface (someone unflagged
    it, or the HTTP host has none), and a known profile default."""
    session_upsert(session_id="ses_global", changes={"global_interface": False})
    settings.DSHLOOP_DEFAULT_PRESET = "profile-preset"
    settings.DSHLOOP_DEFAULT_MODEL = "profile-model"
    return world


def create_at(client, now: datetime, **fields):
    with time_machine.travel(now, tick=False):
        return client.post("/panel/new", form(**fields))


def fire(now: datetime) -> list[LoopRun]:
    """What the scheduler does at `now`: claim the due loops, deliver their runs (one frozen clock)."""
    with time_machine.travel(now, tick=False):
        run_ids = claim_due(now=now)
        deliver_runs(run_ids, now=now)
    return list(LoopRun.objects.filter(run_id__in=run_ids))


def test_the_new_loop_page_offers_new_and_existing_sessions_and_greys_out_self(staff_client, no_global_interface):
    response = staff_client.get("/panel/new")
    assert response.status_code == 200
    page = response.content.decode()
    assert "refused" not in page
    assert "Loops for a fresh session (<code>new</code>) or an existing session can still be created" in page
    radios = dict(re.findall(r'<input type="radio" name="target" value="(\w+)"([^>]*)>', page))
    assert set(radios) == {"self", "new", "session"}
    assert "disabled" in radios["self"] and "disabled" not in radios["new"] + radios["session"]
    assert "checked" in radios["new"]  # the default target is one that can be created
    assert "Global interface (self) — unavailable" in page
    assert '<option value="" selected>The profile default preset</option>' in page


def test_a_new_loop_is_created_with_no_creator_and_its_run_records_the_profile_default(
    staff_client, no_global_interface
):
    response = create_at(staff_client, T0, target="new", kind="every", every_amount="10", every_unit="60")
    assert response.status_code == 302, response.content.decode()[:2000]
    loop = Loop.objects.get()
    assert (loop.session_id, loop.created_by_session_id, loop.next_at) == ("new", "", T0 + timedelta(minutes=10))

    (run,) = fire(T0 + timedelta(minutes=10))

    assert (run.status, run.fallback) == (RunStatus.DELIVERED, FALLBACK)
    made = SessionHeader.objects.get(session_id=run.target_session_id)
    assert (made.preset, made.model, made.first_prompt) == ("profile-preset", "profile-model", "Check the deployment")
    assert InboxMessage.objects.filter(session_id=made.session_id, occurrence_key=run.occurrence_key).exists()
    # Not ses_global's configuration ("interface", "m1"): it is no longer the global interface.
    detail = staff_client.get(f"/panel/loops/{loop.loop_id}/").content.decode()
    assert FALLBACK in detail and "with no creator session" in detail


def test_an_existing_session_loop_is_created_with_no_creator_and_delivered(staff_client, no_global_interface):
    response = create_at(
        staff_client, T0, target="session", session="ses_b", kind="after", after_amount="5", after_unit="1"
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    loop = Loop.objects.get()
    assert (loop.session_id, loop.created_by_session_id) == ("ses_b", "")

    (run,) = fire(T0 + timedelta(seconds=5))

    # spec §2.1: an existing session keeps its own persisted preset and model (resumed from cold):
    # nothing is inherited from the creator, so there is no fallback to record.
    assert (run.status, run.target_session_id, run.fallback) == (RunStatus.DELIVERED, "ses_b", "")
    target = SessionHeader.objects.get(session_id="ses_b")
    assert (target.status, target.preset) == ("idle", "coder")
    assert InboxMessage.objects.filter(session_id="ses_b", occurrence_key=run.occurrence_key).exists()
    assert Loop.objects.get().state == "completed"


def test_self_is_still_refused(staff_client, no_global_interface):
    response = create_at(staff_client, T0, target="self")
    assert response.status_code == 422
    assert field_errors(response, "target")[0].startswith("The global interface session is unavailable")
    assert not Loop.objects.exists()


def test_with_no_global_interface_at_all(staff_client, world):
    # Not even an unflagged ses_global: the state of an HTTP host that has none.
    SessionHeader.objects.filter(session_id="ses_global").delete()
    assert create_at(staff_client, T0, target="new").status_code == 302
    assert create_at(staff_client, T0, target="session", session="ses_a").status_code == 302
    assert sorted(Loop.objects.values_list("session_id", "created_by_session_id")) == [("new", ""), ("ses_a", "")]
