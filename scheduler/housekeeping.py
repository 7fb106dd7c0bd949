"""The housekeeping thread of `runloops`: periodic jobs off the clock thread, so that they never
delay a claim (the clock keeps the main thread; this thread has its own database connection).

A job is a name, an interval and a step: a callable that does one bounded unit of work and
returns True while more remains. A due job is stepped, with a short pause between steps (other
writers get the database in between: SQLite has one writer at a time), until its step returns
False; its next pass starts `interval` seconds after this one started. Jobs take turns step by
step, so a long pass of one never starves another. A step that raises is logged, and its job is
retried at its next interval; the thread itself never dies of it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from django.conf import settings
from django.db import DatabaseError, connection
from django.utils import timezone

from loops.services.ends import END_BATCH, end_passed_loops
from scheduler.retention import Pruner
from scheduler.stored_times import SETTLE_BATCH, Repairs, repair_all, settle_step, stores_text
from sessions_app.hosts import get_host

logger = logging.getLogger("dshloop.housekeeping")

BATCH_PAUSE = 0.05  # seconds between two steps of one pass
# A connection idle longer than this is closed (an hourly job need not hold a PostgreSQL backend
# between passes); a job that runs every few seconds keeps its connection.
IDLE_CLOSE_SECONDS = 60.0
# The automatic pass leaves a loop alone until it holds more than limit × (1 + this) runs, then
# prunes it to the limit: each cutoff read pays for at least this share of deletions (retention).
PRUNE_HEADROOM = 0.25


@dataclass
class Job:
    name: str
    interval: float  # seconds from the start of one pass to the start of the next
    step: Callable[[], bool]  # one bounded unit of work; True while more remains


@dataclass
class _Schedule:
    job: Job
    due: float  # time.monotonic()
    pass_started: float | None = field(default=None)


class PruneJob:
    """The retention rules (scheduler.retention), one bounded batch per step; `now` is taken once per pass."""

    def __init__(self) -> None:
        self.pruner: Pruner | None = None

    def step(self) -> bool:
        if self.pruner is None:
            limit = settings.DSHLOOP_RUN_HISTORY_LIMIT
            self.pruner = Pruner(now=timezone.now(), run_limit=limit, headroom=int(limit * PRUNE_HEADROOM))
        try:
            more = self.pruner.step()
        except BaseException:
            self.pruner = None  # the next pass starts afresh
            raise
        if not more:
            pruner, self.pruner = self.pruner, None
            if pruner.runs or pruner.inbox_messages:
                logger.info(
                    "pruned %d run(s) of %d loop(s) and %d inbox message(s) older than %s; with the runs, "
                    "%d session(s) made for them (%d inbox message(s)) and %d unused prompt(s)",
                    pruner.runs,
                    pruner.loops,
                    pruner.inbox_messages,
                    pruner.inbox_cutoff.isoformat(timespec="seconds"),
                    pruner.sessions,
                    pruner.session_messages,
                    pruner.prompts,
                )
        return more


# How often deadlines written in another form are looked for (scheduler.stored_times): the clock
# sees only deadlines in Django's form, so this bounds how late one written by hand while the scheduler runs fires
# (those written before are repaired at start-up, startup_checks). A pass that finds none is one
# read, under no write lock.
SETTLE_INTERVAL_SECONDS = 10.0


class SettleJob:
    """The repair of deadlines stored in another form (scheduler.stored_times), one bounded batch per
    step; what a pass repaired is logged once, at its end (or when a step fails)."""

    def __init__(self, *, limit: int = SETTLE_BATCH) -> None:
        self.limit = limit
        self.repairs: Repairs | None = None

    def step(self) -> bool:
        if self.repairs is None:
            self.repairs = Repairs()
        try:
            more = settle_step(now=timezone.now(), repairs=self.repairs, limit=self.limit)
        except BaseException:
            self._end_pass()  # the steps before it committed: say what they did
            raise
        if not more:
            self._end_pass()
        return more

    def _end_pass(self) -> None:
        repairs, self.repairs = self.repairs, None
        if repairs is not None:
            repairs.log("deadline repair")


# How often loops whose ends_at has passed with nothing left to run (paused ones, above all) are
# completed (contract §16): how late, at most, such a loop reads completed. A pass that finds none
# is one read of loop_ends_idx; once a minute keeps an idle scheduler within B3's 10 statements a
# minute (every 10 s cost six).
END_INTERVAL_SECONDS = 60.0


def end_passed_step() -> bool:
    """One batch of loops past their ends_at with nothing left to run, completed without a run; more
    remain after a full one."""
    return end_passed_loops(now=timezone.now()) >= END_BATCH


OUTCOME_POLL_LIMIT = 200  # runs asked about per poll


def poll_outcomes_step() -> bool:
    """One poll of the host's turn outcomes (scheduler.outcome_watch); more remain after a full batch."""
    # Imported here: only a host that logs turn ends (dsh) runs this job, and the scheduler
    # imports only what it runs (memory).
    from scheduler.outcome_watch import poll_outcomes

    return poll_outcomes(limit=OUTCOME_POLL_LIMIT) >= OUTCOME_POLL_LIMIT


# How often webhook events owed (scheduler.failure_webhook) are looked for, when a webhook is
# configured: a look that finds none is one read of a partial index holding only what is pending.
# Notices are looked for every DSHLOOP_FAILURE_NOTICE_POLL_SECONDS (an idle scheduler's cost).
WEBHOOK_INTERVAL_SECONDS = 5.0


def send_notices_step() -> bool:
    from scheduler.failure_notices import NOTICE_BATCH, send_notices

    return send_notices(limit=NOTICE_BATCH) >= NOTICE_BATCH


def startup_checks(stop: threading.Event | None = None) -> None:
    """What `runloops` repairs before its clock starts: every deadline stored in another form
    (scheduler.stored_times), so that the clock's queries see every deadline from the first tick.
    A database that cannot be reached now does not stop the scheduler: the clock waits for it, and
    housekeeping's first pass repairs what this could not. A stop asked meanwhile ends it between
    batches."""
    try:
        repair_all(now=timezone.now(), by="deadline repair", stop=stop)
    except DatabaseError as exc:
        logger.warning("the start-up repair of stored deadlines could not run (%s); housekeeping's pass will", exc)
        connection.close()


def default_jobs() -> list[Job]:
    """The jobs `runloops` runs: retention at start, then every DSHLOOP_PRUNE_INTERVAL_SECONDS; on
    SQLite, settling deadlines stored in another form every SETTLE_INTERVAL_SECONDS; completing loops
    past their ends_at with nothing left to run every END_INTERVAL_SECONDS; for a host that tells how
    turns end, reading those outcomes every few seconds; and failure notices, unless
    DSHLOOP_FAILURE_NOTICES=0."""
    jobs = [Job("prune", settings.DSHLOOP_PRUNE_INTERVAL_SECONDS, PruneJob().step)]
    jobs.append(Job("ends", END_INTERVAL_SECONDS, end_passed_step))
    if stores_text():
        jobs.append(Job("deadlines", SETTLE_INTERVAL_SECONDS, SettleJob().step))
    if get_host().capabilities.turn_outcomes:
        jobs.append(Job("outcomes", settings.DSHLOOP_OUTCOME_POLL_SECONDS, poll_outcomes_step))
    if settings.DSHLOOP_FAILURE_NOTICES:
        jobs.append(Job("failure notices", settings.DSHLOOP_FAILURE_NOTICE_POLL_SECONDS, send_notices_step))
    return jobs


def webhook_jobs() -> list[Job]:
    """The failure webhook's job (DSHLOOP_FAILURE_WEBHOOK_URL), for a thread of its own: a receiver
    that answers slowly holds that thread only, never housekeeping's other jobs."""
    if not settings.DSHLOOP_FAILURE_WEBHOOK_URL:
        return []
    # Imported only when configured: httpx is megabytes a scheduler without a webhook never needs.
    from scheduler.failure_webhook import WebhookSender

    return [Job("failure webhook", WEBHOOK_INTERVAL_SECONDS, WebhookSender().step)]


class Housekeeper(threading.Thread):
    """Runs `jobs` until `stop` is set: each job at start, then once per interval."""

    def __init__(
        self, stop: threading.Event, *, jobs: list[Job], pause: float = BATCH_PAUSE, name: str = "housekeeping"
    ):
        super().__init__(name=name, daemon=True)
        self.stop = stop
        self.jobs = list(jobs)
        self.pause = pause

    def run(self) -> None:
        logger.info("%s started: %s", self.name, ", ".join(f"{job.name} every {job.interval:g} s" for job in self.jobs))
        started = time.monotonic()
        schedules = [_Schedule(job, due=started) for job in self.jobs]
        try:
            while schedules and not self.stop.is_set():
                for schedule in schedules:
                    if self.stop.is_set():
                        break
                    if schedule.due <= time.monotonic():
                        self._step(schedule)
                wait = min(schedule.due for schedule in schedules) - time.monotonic()
                if wait > IDLE_CLOSE_SECONDS:
                    self._close_connection()
                if wait > 0:
                    self.stop.wait(wait)
        finally:
            self._close_connection()
            logger.info("%s stopped", self.name)

    def _step(self, schedule: _Schedule) -> None:
        job = schedule.job
        if schedule.pass_started is None:
            schedule.pass_started = time.monotonic()
        try:
            more = job.step()
        except Exception as exc:
            more = False
            if isinstance(exc, DatabaseError):  # e.g. a server restart: expected, no traceback
                logger.warning(
                    "housekeeping job %s: database unavailable (%s); retrying in %ss", job.name, exc, job.interval
                )
            else:
                logger.exception("housekeeping job %s raised; retrying in %ss", job.name, job.interval)
            self._close_connection()  # a failure can leave it unusable; the next step reconnects
        if more:
            schedule.due = time.monotonic() + self.pause
        else:
            schedule.due, schedule.pass_started = schedule.pass_started + job.interval, None

    @staticmethod
    def _close_connection() -> None:
        try:
            connection.close()
        except Exception:
            logger.debug("closing the housekeeping connection raised", exc_info=True)
