"""DSHLOOP_LOG_FORMAT=json end to end: a real `runloops` delivers one occurrence and fails
another, and everything it writes is JSON a log pipeline can search, each occurrence with its facts."""

from __future__ import annotations

import json

import pytest

from loops.models import LoopRun, RunStatus
from sessions_app.models import SessionHeader
from tests.conftest import after, create_loop
from tests.processes import Schedulers, wait_for

pytestmark = [pytest.mark.process, pytest.mark.django_db(transaction=True)]

OCCURRENCE_KEYS = {
    "loop_id",
    "run_id",
    "occurrence_key",
    "scheduled_at",
    "lateness_ms",
    "outcome",
    "attempt",
    "target",
}


@pytest.fixture
def json_schedulers(tmp_path, host):
    running = Schedulers(tmp_path, **host.scheduler_env(), DSHLOOP_LOG_FORMAT="json")
    yield running
    running.close()


def iso_ms(moment) -> str:
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def finished_run(loop_id: str) -> LoopRun | None:
    return LoopRun.objects.filter(loop_id=loop_id, status__in=[RunStatus.DELIVERED, RunStatus.FAILED]).first()


def test_json_logs_are_one_object_a_line_with_each_occurrence_s_fields(
    json_schedulers, api, global_session, make_session
):
    created = api.tool("loop_create", {"prompt": "report", "schedule": after(1), "session_id": "self"}).json()
    delivered = created["loop_id"]
    make_session("ses_gone", status="idle")
    failed = create_loop(after(1), target="ses_gone").loop_id
    SessionHeader.objects.filter(session_id="ses_gone").delete()  # the delivery finds no session
    [scheduler] = json_schedulers.start_ready()

    wait_for(lambda: finished_run(delivered) and finished_run(failed), timeout=30, message="both occurrences")
    scheduler.terminate()  # its stop lines too

    lines = scheduler.output().splitlines()
    assert lines, "runloops wrote nothing"
    entries = []
    for line in lines:
        try:
            entries.append(json.loads(line))
        except ValueError:
            pytest.fail(f"not a JSON line: {line!r}\n{scheduler.output()[-3000:]}")
    for entry in entries:
        assert {"time", "level", "logger", "message"} <= set(entry), entry
    occurrences = {entry["loop_id"]: entry for entry in entries if "occurrence_key" in entry}
    assert set(occurrences) == {delivered, failed}, entries

    for loop_id, outcome in ((delivered, "delivered"), (failed, "failed")):
        run, entry = LoopRun.objects.get(loop_id=loop_id), occurrences[loop_id]
        assert OCCURRENCE_KEYS <= set(entry), entry
        assert (entry["run_id"], entry["occurrence_key"], entry["scheduled_at"]) == (
            run.run_id,
            run.occurrence_key,
            iso_ms(run.scheduled_at),
        )
        assert (entry["outcome"], entry["attempt"], entry["target"]) == (
            outcome,
            run.attempt,
            run.target_session_id or None,
        )
        # Measured when the outcome was settled: at or after the schedule, and not long after here.
        assert isinstance(entry["lateness_ms"], int) and 0 <= entry["lateness_ms"] < 10_000, entry
        assert f"loop={loop_id} " in entry["message"] and f"outcome={outcome}" in entry["message"]  # the human text

    assert occurrences[delivered]["target"] == "ses_global" and "error" not in occurrences[delivered]
    assert "no longer exists" in occurrences[failed]["error"]
