"""Migration 0017 remembers the loops deleted before it (DeletedLoop), so that their runs, which
outlived them, are found and marked as a deleted loop's like those of loops deleted after it. On
both engines (the suite's two passes)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from loops.models import DeletedLoop
from tests.conftest import T0, s

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("loops", "0016_failure_notices")]
AFTER = [("loops", "0017_deleted_loops")]


def migrate(targets):
    executor = MigrationExecutor(connection)
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


def test_loops_deleted_before_the_migration_are_remembered_from_their_runs_and_trail():
    apps = migrate(BEFORE)
    try:
        Loop, LoopRun, LoopEvent = (apps.get_model("loops", name) for name in ("Loop", "LoopRun", "LoopEvent"))

        def run(loop_id: str, at, target: str) -> None:
            key = f"{loop_id}@{int(at.timestamp() * 1000)}"
            LoopRun.objects.create(
                run_id=f"run_{key}", loop_id=loop_id, occurrence_key=key, scheduled_at=at, claimed_at=at, target=target
            )

        Loop.objects.create(
            loop_id="loop_live", prompt="p", kind="every", every_seconds=60, session_id="ses_a", created_at=T0
        )
        run("loop_live", T0, "ses_a")
        # Deleted with its trail: retargeted once, so its newest run names the target it had last.
        run("loop_gone", T0, "ses_a")
        run("loop_gone", T0 + s(60), "ses_b")
        deleted_at = T0 + timedelta(hours=1)
        LoopEvent.objects.create(loop_id="loop_gone", at=deleted_at, kind="deleted", actor_kind="user", revision=2)
        # Deleted before the trail existed: its newest run's time stands for the deletion's.
        run("loop_untracked", T0 + s(120), "self")

        migrate(AFTER)

        remembered = {row.loop_id: (row.session_id, row.name, row.deleted_at) for row in DeletedLoop.objects.all()}
        assert remembered == {
            "loop_gone": ("ses_b", "", deleted_at),
            "loop_untracked": ("self", "", T0 + s(120)),
        }
    finally:
        migrate(AFTER)  # the next test starts from the latest schema, whatever happened here
