"""An imported v1 loop fires through a real `runloops` process like any other loop."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone

from core.timeutil import to_ms
from loops.models import Loop, LoopRun
from sessions_app.models import InboxMessage
from tests.processes import wait_for

pytestmark = [pytest.mark.process, pytest.mark.django_db(transaction=True)]


def test_imported_loop_is_delivered_by_runloops_to_its_session_on_the_v1_grid(make_session, schedulers, tmp_path):
    make_session("ses_v1", status="cold", preset="coder", model="m1")
    created = to_ms(timezone.now()) - 2_500  # the v1 loop's grid: created + k * 2 s
    path = tmp_path / "v1-export.json"
    path.write_text(
        json.dumps(
            [
                {
                    "id": "v1_tick",
                    "prompt": "Tick <&> from v1",
                    "time_in_seconds": 2,
                    "session_id": "ses_v1",
                    "created_at": created,
                }
            ]
        )
    )
    call_command("import_v1_loops", str(path), stdout=StringIO())
    loop = Loop.objects.get(v1_id="v1_tick")

    schedulers.start()
    wait_for(
        lambda: InboxMessage.objects.filter(session_id="ses_v1").count() >= 2,
        timeout=30,
        message="two deliveries of the imported loop",
    )

    messages = list(InboxMessage.objects.filter(session_id="ses_v1").order_by("created_at"))
    first = ET.fromstring(messages[0].text)  # spec §6's message, the prompt escaped
    assert (first.findtext("loop_id"), first.findtext("prompt")) == (loop.loop_id, "Tick <&> from v1")
    runs = list(LoopRun.objects.filter(loop_id=loop.loop_id, status="delivered").order_by("scheduled_at"))
    assert len(runs) >= 2
    # Every occurrence sits on the v1 grid, one interval apart: the cadence survived the import.
    offsets = [to_ms(run.scheduled_at) - created for run in runs]
    assert all(offset % 2_000 == 0 for offset in offsets), offsets
    assert offsets[1] - offsets[0] == 2_000, offsets
    assert {m.occurrence_key for m in messages} <= {run.occurrence_key for run in LoopRun.objects.all()}
