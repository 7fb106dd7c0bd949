"""What a run is, said once: its id, the key of the occurrence it stands for, the statuses in
which it is still open, and its lease. The registry (a manual run) and the scheduler (claims,
delivery, retention) both make and take runs with these."""

from __future__ import annotations

import secrets
from datetime import datetime, timedelta
from typing import Any, TypeVar

from django.conf import settings
from django.db import connection
from django.db.models import QuerySet

from core.timeutil import to_ms
from loops.models import RunStatus

OPEN_STATUSES = (RunStatus.CLAIMED, RunStatus.DELIVERING)

_Rows = TypeVar("_Rows", bound=QuerySet[Any, Any])


def new_run_id() -> str:
    return "run_" + secrets.token_hex(8)


def occurrence_key(loop_id: str, scheduled_at: datetime) -> str:
    """The unique key of a scheduled occurrence: the last guard against a double dispatch."""
    return f"{loop_id}@{to_ms(scheduled_at)}"


def manual_occurrence_key(loop_id: str, run_id: str) -> str:
    """A manual run stands for no scheduled occurrence: its own key, never one a claim makes."""
    return f"{loop_id}@manual:{run_id}"


def skipped_occurrence_key(key: str, run_id: str) -> str:
    """A run skipped because its occurrence already has a run: the original key stays with that one."""
    return f"{key}:skipped:{run_id}"


def lease() -> timedelta:
    """How long a claimed or started run may stay open before the clock enqueues it again."""
    return timedelta(seconds=settings.DSHLOOP_RUN_LEASE_SECONDS)


def free_rows(queryset: _Rows) -> _Rows:
    """The rows no other transaction holds, locked for this one: for taking work (claims, leases)
    that any of several schedulers may take. Rows another transaction has locked are skipped.

    On PostgreSQL the LIMIT sits in the top-level SELECT … FOR UPDATE SKIP LOCKED, not in a
    subquery (where it may lock more rows than the limit). SQLite has no row locks: there the
    callers' compare-and-swap updates and IMMEDIATE transactions do this job."""
    if connection.vendor == "postgresql":
        return queryset.select_for_update(skip_locked=True)
    return queryset
