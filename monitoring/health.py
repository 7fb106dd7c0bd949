"""GET|HEAD /api/health (contract §4, §12): no auth, so an uptime monitor, a load balancer or a
person can ask whether loops will fire.

The status code is the verdict, because uptime monitors read status codes (and often ask with
HEAD, which gets the same status and no body):

- 200 when the database answers and at least one scheduler is alive (ticked in the last 60 s).
  The body is contract §4's, plus §12's three numbers, and `problems` only when something still
  needs a person (loops set aside because their stored deadline was not a timestamp, a host that
  gives no answer and the runs it stalls, deliveries that failed in the last 15 minutes or wait for
  a retry after failing)::

      {"database": "ok", "scheduler": {"alive": true, "instances": 1, "last_tick_at": 1748858410000},
       "due_backlog": 0, "oldest_open_run_age_s": 0.0, "database_rtt_ms": 0.412}

- 503 when no scheduler is alive: the same body with `alive` false, so a person sees why and what
  is waiting, plus `problems`, short sentences saying what is wrong. `last_tick_at` is then the
  newest tick of any scheduler that stopped without saying goodbye (one stopped by SIGTERM removes
  its heartbeat, so a clean stop leaves none).
- 503 when the database does not answer: `{"database": "error", "scheduler": {"alive": false,
  "instances": 0}, "problems": [...]}`, and none of the numbers, which nobody can know then. The
  cause goes to the server's log, not to this unauthenticated body (it can name hosts and users).

Never a 500: a monitor must tell "down" from "broken".

The numbers:

- `due_backlog`: scheduled loops whose next occurrence is due and not yet claimed; a backlog that
  grows while a scheduler is alive means the schedulers cannot keep up.
- `oldest_open_run_age_s`: seconds since the oldest run still claimed or being delivered was
  claimed (ms precision), 0 when none is open. Always present, as the contract names it, and 0 is
  what the `/metrics` gauge says too: "nothing has been stuck for any time".
- `database_rtt_ms`: one `SELECT 1` round trip on an open connection (opening or health-checking
  the connection is not counted), to the µs: rounded to 0.1 ms a local SQLite, whose round trip
  is a few µs, would always read 0, indistinguishable from "not measured".

They come from monitoring.gauges' one statement (what `/metrics` reads, without the loops by state),
after the `SELECT 1`: two round trips in all, and index reads only, whatever the number of loops.
(`problems` counts the set-aside loops on a partial index that is empty unless something wrote a
deadline that names no moment: see scheduler.stored_times.)
"""

from __future__ import annotations

import logging
import time
from datetime import datetime, timedelta
from typing import Literal

from django.db import DatabaseError, connection
from django.db.models import Count, Max, Q
from django.utils import timezone
from ninja import Router, Status
from pydantic import BaseModel, Field

from core.errors import one_line
from core.timeutil import to_ms
from loops import humanize
from loops.models import SchedulerHeartbeat
from monitoring.gauges import ALIVE_WINDOW, FAILED_WINDOW, read_gauges
from sessions_app.hosts import get_host

logger = logging.getLogger("dshloop.health")

router = Router(tags=["health"])

FAILED_MINUTES = FAILED_WINDOW // timedelta(minutes=1)
DATABASE_DOWN = "The database did not answer; the server's log says why."


class SchedulerOut(BaseModel):
    alive: bool = Field(description="At least one scheduler ticked in the last 60 s.")
    instances: int = Field(description="Schedulers that ticked in the last 60 s.")
    last_tick_at: int | None = Field(
        None, description="The newest tick of any scheduler (epoch ms); absent when no scheduler has a heartbeat."
    )


class HealthOut(BaseModel):
    """All is well: contract §4's body and §12's numbers."""

    database: Literal["ok"]
    scheduler: SchedulerOut
    due_backlog: int = Field(description="Scheduled loops due and not yet claimed.")
    oldest_open_run_age_s: float = Field(description="Seconds since the oldest open run was claimed; 0 when none.")
    database_rtt_ms: float = Field(description="One `SELECT 1` round trip, in ms.")
    problems: list[str] | None = Field(
        None,
        description=(
            "Present when loops will fire but something needs a person: loops the scheduler set aside, "
            "a host that gives no answer (named, with the runs it stalls), "
            f"deliveries that failed in the last {FAILED_MINUTES} minutes or are being retried "
            "after failing."
        ),
    )


class HealthProblemsOut(BaseModel):
    """503: no scheduler is alive, or the database is down (then without the numbers)."""

    database: Literal["ok", "error"]
    scheduler: SchedulerOut
    due_backlog: int | None = None
    oldest_open_run_age_s: float | None = None
    database_rtt_ms: float | None = None
    problems: list[str] = Field(description="What is wrong, one short sentence each.")


RESPONSES: dict[int, type[BaseModel]] = {200: HealthOut, 503: HealthProblemsOut}


def scheduler_view(*, instances: int, last_tick_at: datetime | None) -> dict:
    """contract §4's `scheduler` object."""
    view = {"alive": instances > 0, "instances": instances}
    if last_tick_at is not None:
        view["last_tick_at"] = to_ms(last_tick_at)
    return view


def scheduler_health(now: datetime | None = None) -> dict:
    """The `scheduler` object alone, for the panel's banner: one query on the heartbeats, none on
    the loops (the panel asks on every page)."""
    now = now or timezone.now()
    summary = SchedulerHeartbeat.objects.aggregate(
        instances=Count("pk", filter=Q(last_tick_at__gte=now - ALIVE_WINDOW)), last=Max("last_tick_at")
    )
    return scheduler_view(instances=summary["instances"], last_tick_at=summary["last"])


def health_report(now: datetime | None = None) -> tuple[int, dict]:
    """The status and the body of GET /api/health at `now`."""
    now = now or timezone.now()
    try:
        rtt_ms = _round_trip_ms()
        gauges = read_gauges(now, by_state=False)  # no pass over the loop table: polled often
    except DatabaseError as exc:
        logger.warning("health: the database did not answer: %s", one_line(exc))
        _drop_if_broken()
        return 503, {"database": "error", "scheduler": {"alive": False, "instances": 0}, "problems": [DATABASE_DOWN]}
    scheduler = scheduler_view(instances=gauges.scheduler_instances, last_tick_at=gauges.last_tick_at)
    body = {
        "database": "ok",
        "scheduler": scheduler,
        "due_backlog": gauges.due_backlog,
        "oldest_open_run_age_s": round(gauges.oldest_open_run_age_seconds, 3),
        "database_rtt_ms": rtt_ms,
    }
    problems = [] if scheduler["alive"] else [_no_scheduler(gauges.last_tick_at, now)]
    if gauges.unreadable_loops:
        problems.append(_unreadable(gauges.unreadable_loops))
    if gauges.waiting_for_host:
        problems.append(_host_down(gauges.waiting_for_host))
    retrying = gauges.retrying_runs - gauges.waiting_for_host  # the others: the host answered with an error
    if retrying or gauges.failed_recently:
        problems.append(_failing(retrying=retrying, failed=gauges.failed_recently))
    if problems:
        body["problems"] = problems
    return (200 if scheduler["alive"] else 503), body


def _round_trip_ms() -> float:
    with connection.cursor() as cursor:  # connects (or health-checks) first: not part of the round trip
        started = time.perf_counter()
        cursor.execute("SELECT 1")
        cursor.fetchone()
        took = time.perf_counter() - started
    return round(took * 1000, 3)


def _drop_if_broken() -> None:
    """Close this thread's connection if it no longer works, so the next request opens a new one.

    A server does the same when the request finishes (Django's close_old_connections), but not
    every caller is a server request (tests, a management command), and a monitor polls this
    exactly while the database comes back. Never inside a transaction: closing would doom it.
    """
    if not connection.in_atomic_block:
        connection.close_if_unusable_or_obsolete()


def _unreadable(count: int) -> str:
    loops = "1 loop was" if count == 1 else f"{count} loops were"
    return (
        f"{loops} paused because the stored next run time was not a timestamp (written by hand or another "
        "tool?): the server's log names them; resume them to schedule them from now."
    )


def _host_down(stalled: int) -> str:
    """The host gives no answer: named (DSH), with the runs it holds up; not its address, which
    this body (no token needed) must not tell."""
    runs = "1 run is" if stalled == 1 else f"{stalled} runs are"
    return (
        f"{get_host().label} gives no answer (refused or timed out): {runs} stalled, retried until it answers; "
        "is it running?"
    )


def _failing(*, retrying: int, failed: int) -> str:
    """Loops fire, but deliveries fail: the count without the errors, which can name sessions and
    hosts (this body needs no token); the runs' own records say why."""
    parts = []
    if failed:
        parts.append(f"{_deliveries(failed)} failed in the last {FAILED_MINUTES} minutes")
    if retrying:
        parts.append(f"{_deliveries(retrying)} failed and will be retried")
    return "; ".join(parts) + ": each run's error says why (the panel's loop pages, GET /api/loops/{id}/runs)."


def _deliveries(count: int) -> str:
    return "1 delivery" if count == 1 else f"{count} deliveries"


def _no_scheduler(last_tick_at: datetime | None, now: datetime) -> str:
    window = int(ALIVE_WINDOW.total_seconds())
    if last_tick_at is None:
        return f"No scheduler is running (none has ticked in the last {window} s): start `runloops` or `serve`."
    return (
        f"No scheduler has ticked in the last {window} s (the last tick was {humanize.ago(last_tick_at, now)}): "
        "is `runloops` running and reaching the database?"
    )


@router.get("/health", auth=None, response=RESPONSES, exclude_none=True)
def health(request):
    """200 when loops will fire: the database answers and a scheduler ticked in the last 60 s;
    503, with `problems`, when not."""
    status, body = health_report()
    return Status(status, body)


@router.api_operation(
    ["HEAD"],
    "/health",
    auth=None,
    response=RESPONSES,
    exclude_none=True,
    operation_id="health_head",
    summary="Health (HEAD)",
)
def health_head(request):
    """The same status for uptime monitors, which ask with HEAD; the server sends it without the body."""
    return health(request)
