"""The durable loop registry (spec §4, §5) and its run history."""

from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django.core.validators import MinValueValidator
from django.db import connection, models
from django.db.models import Q

from core.limits import MAX_ID_CHARS, MAX_NAME_CHARS
from loops.choices import (
    AWAITING_APPROVAL,
    UNREADABLE_REASON,
    ActorKind,
    EventKind,
    LoopState,
    Overlap,
    RunOutcome,
    RunStatus,
    ScheduleKind,
)
from loops.scheduler_rows import (
    FailureEpisode,
    FailureEvent,
    MetricCounter,
    NoticeStatus,
    SchedulerHeartbeat,
    WebhookStatus,
)
from timing import schedules
from timing.jitter import jitter_delay

# What loops.models answers for besides its own models: the values they take (loops.choices) and
# the scheduler's rows kept in this app's tables (loops.scheduler_rows), registered from here.
__all__ = [
    "AWAITING_APPROVAL",
    "UNREADABLE_REASON",
    "ActorKind",
    "EventKind",
    "LoopState",
    "Overlap",
    "RunOutcome",
    "RunStatus",
    "ScheduleKind",
    "FailureEpisode",
    "FailureEvent",
    "MetricCounter",
    "NoticeStatus",
    "SchedulerHeartbeat",
    "WebhookStatus",
]


class Loop(models.Model):
    loop_id = models.CharField(max_length=40, primary_key=True)
    prompt = models.TextField()
    kind = models.CharField(max_length=5, choices=ScheduleKind.choices)
    every_seconds = models.BigIntegerField(null=True, blank=True)
    after_seconds = models.BigIntegerField(null=True, blank=True)
    cron_expr = models.CharField(max_length=200, blank=True)
    tz = models.CharField(max_length=64, blank=True, help_text="Only when supplied; else the host TIME_ZONE.")
    # The execution target: "self", "new" or an actual session ID (spec §2.1).
    session_id = models.CharField(max_length=MAX_ID_CHARS, db_index=True)
    preset = models.CharField(max_length=255, blank=True, help_text='Only for session_id "new".')
    # Empty when there was no caller and no global interface to record (a panel loop).
    created_by_session_id = models.CharField(max_length=MAX_ID_CHARS, blank=True)
    created_at = models.DateTimeField()
    # The next deadline lives on the row. Null once the loop has no future occurrence.
    next_at = models.DateTimeField(null=True, blank=True)
    state = models.CharField(max_length=10, choices=LoopState.choices, default=LoopState.SCHEDULED)
    last_run_at = models.DateTimeField(null=True, blank=True)
    last_result = models.CharField(max_length=10, blank=True)
    last_error = models.TextField(blank=True)
    # The host's report of how the last run's turn ended (contract §10), while it is the latest.
    last_outcome = models.CharField(max_length=10, blank=True)
    last_summary = models.TextField(blank=True)
    v1_id = models.CharField(
        max_length=255, null=True, blank=True, unique=True, help_text="The id of an imported v1 loop."
    )
    # contract §9, operators' fields: a display name, the revision each edit increments (every run
    # records the one it executed), and why and since when the loop is paused.
    name = models.CharField(max_length=MAX_NAME_CHARS, blank=True)
    revision = models.PositiveIntegerField(default=1)
    paused_at = models.DateTimeField(null=True, blank=True)
    pause_reason = models.CharField(max_length=200, blank=True)
    consecutive_failures = models.PositiveIntegerField(default=0)
    # Where the schedule's grid starts: creation, or the last edit of its schedule or target (an
    # edit recomputes next_at from the edit time). Null: created_at.
    schedule_from = models.DateTimeField(null=True, blank=True)
    # contract §14, `new` loops only (empty, and "allow", on others): the directory every fresh
    # session starts in (captured from the creator; empty: DSHLOOP_DSH_CWD), the host permission
    # preset applied to it, and whether an occurrence starts while the last run's turn still runs.
    workspace = models.CharField(max_length=1024, blank=True)
    permission_preset = models.CharField(max_length=64, blank=True)
    overlap = models.CharField(max_length=5, choices=Overlap.choices, default=Overlap.ALLOW)
    # contract §16, where a loop ends (timing.ends): the last occurrence at or before ends_at runs; after
    # max_runs delivered runs it ends. runs_delivered counts its delivered scheduled runs, ever
    # (retention prunes runs, never this), incremented where delivery records them.
    ends_at = models.DateTimeField(null=True, blank=True)
    max_runs = models.PositiveIntegerField(null=True, blank=True, validators=[MinValueValidator(1)])
    runs_delivered = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["next_at", "created_at"]
        indexes = [
            # The clock's query "earliest due scheduled loop": WHERE state='scheduled' AND
            # next_at <= now ORDER BY next_at LIMIT n, and the sleep query (MIN next_at).
            models.Index(fields=["next_at"], condition=Q(state="scheduled"), name="loop_due_idx"),
            models.Index(fields=["created_at"], name="loop_created_idx"),
            # loop_list and the panel's list (selectors._ordered): WHERE state <> 'completed' ORDER BY
            # next_at (NULLS LAST: PostgreSQL's ascending order), created_at, loop_id [LIMIT n]; each
            # keyset page of selectors.loop_rows is a range scan on it.
            models.Index(
                fields=["next_at", "created_at", "loop_id"], condition=~Q(state="completed"), name="loop_list_idx"
            ),
            # The quota count for "new"/"self" loops (selectors.active_loops_in_quota):
            # WHERE created_by_session_id = X AND session_id IN ('new', 'self') AND state <> 'completed'.
            models.Index(fields=["created_by_session_id", "session_id"], name="loop_creator_idx"),
            # Health's count of loops set aside for an unreadable next_at (monitoring.gauges); empty
            # unless something wrote such a row.
            models.Index(
                fields=["loop_id"],
                condition=Q(state="paused", pause_reason=UNREADABLE_REASON),
                name="loop_unreadable_idx",
            ),
            # The housekeeping pass that ends loops whose ends_at has passed with nothing left to run
            # (loops.services.ends.end_passed_loops): WHERE state IN ('paused', 'scheduled') AND
            # ends_at <= now; a loop that ended is completed and leaves it.
            models.Index(
                fields=["ends_at"],
                condition=Q(state__in=["paused", "scheduled"], ends_at__isnull=False),
                name="loop_ends_idx",
            ),
        ]

    def __str__(self) -> str:
        return self.loop_id

    @property
    def anchor(self):
        """The instant an `every` grid and an `after` delay count from (schedule_from or created_at)."""
        return self.schedule_from or self.created_at

    @property
    def schedule(self) -> schedules.Schedule:
        return schedule_of_columns(self.kind, self.every_seconds, self.after_seconds, self.cron_expr, self.tz)

    @schedule.setter
    def schedule(self, schedule: schedules.Schedule) -> None:
        for column, value in columns_of_schedule(schedule).items():
            setattr(self, column, value)

    @property
    def timing(self) -> schedules.Timing:
        """The schedule as the scheduler runs it: every computation of a deadline (claim, resume,
        edit, backoff, upcoming) uses this, never `schedule`, which is what the user asked for."""
        return timing_of(self.schedule, self.loop_id)


def timing_of(schedule: schedules.Schedule, loop_id: str) -> schedules.Timing:
    """contract §16: a cron loop's deliveries delayed by its jitter (DSHLOOP_CRON_JITTER_SECONDS);
    every other schedule as it is (an interval has no shared instant to burst at)."""
    if isinstance(schedule, schedules.Cron) and settings.DSHLOOP_CRON_JITTER_SECONDS:
        delay = jitter_delay(loop_id, settings.DSHLOOP_CRON_JITTER_SECONDS)
        if delay:
            return schedules.Delayed(schedule, delay)
    return schedule


# The kinds whose schedule has a single occurrence, for queries that branch on it in SQL.
ONE_SHOT_KINDS = tuple(schedule.kind for schedule in schedules.SCHEDULE_TYPES if schedule.one_shot)

# The one mapping between a schedule and the columns that store it: everything else reads and
# writes a loop's schedule through Loop.schedule, or reads these columns by this name.
SCHEDULE_COLUMNS = ("kind", "every_seconds", "after_seconds", "cron_expr", "tz")


def schedule_of_columns(
    kind: str, every_seconds: int | None, after_seconds: int | None, cron_expr: str, tz: str
) -> schedules.Schedule:
    """The schedule stored in a row's SCHEDULE_COLUMNS (in that order). ValueError for columns
    that describe none (a row written by hand)."""
    if kind == ScheduleKind.EVERY and every_seconds is not None:
        return schedules.Every(every_seconds)
    if kind == ScheduleKind.AFTER and after_seconds is not None:
        return schedules.After(after_seconds)
    if kind == ScheduleKind.CRON:
        return schedules.Cron(cron_expr, tz or None)
    raise ValueError(f"the schedule columns of a {kind!r} loop are incomplete")


def columns_of_schedule(schedule: schedules.Schedule) -> dict[str, object]:
    """The SCHEDULE_COLUMNS values that store `schedule` (the unused ones empty)."""
    columns: dict[str, object] = {"kind": schedule.kind, "every_seconds": None, "after_seconds": None}
    columns |= {"cron_expr": "", "tz": ""}
    match schedule:
        case schedules.Every(every_seconds=seconds):
            columns["every_seconds"] = seconds
        case schedules.After(after_seconds=seconds):
            columns["after_seconds"] = seconds
        case schedules.Cron(expr=expr, tz=tz):
            columns["cron_expr"], columns["tz"] = expr, tz or ""
    return columns


class LoopRun(models.Model):
    """One occurrence of one loop. Outlives the loop (no foreign key on purpose)."""

    run_id = models.CharField(max_length=40, primary_key=True)
    loop_id = models.CharField(max_length=40)  # indexed by run_loop_idx
    # "<loop_id>@<scheduled_at epoch ms>": unique, the final guard against double dispatch.
    occurrence_key = models.CharField(max_length=120, unique=True)
    scheduled_at = models.DateTimeField()
    status = models.CharField(max_length=10, choices=RunStatus.choices, default=RunStatus.CLAIMED)
    attempt = models.PositiveIntegerField(default=0)
    missed = models.PositiveIntegerField(default=0)
    # Snapshots, so history explains itself after the loop changes or is deleted. The prompt is
    # the revision's (LoopPrompt, read through loop_id and revision): stored once, not per run.
    target = models.CharField(max_length=MAX_ID_CHARS, blank=True, help_text="The loop's target when claimed.")
    target_session_id = models.CharField(max_length=MAX_ID_CHARS, blank=True)
    claimed_at = models.DateTimeField()
    # While the run is open (claimed/delivering): when the clock must (re-)enqueue it if it is
    # still open then — after a backoff, or because the process driving it died.
    retry_at = models.DateTimeField(null=True, blank=True)
    # A driver holds the run until lease_until; another may take over only after it.
    lease_until = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    error = models.TextField(blank=True)
    fallback = models.CharField(max_length=255, blank=True)
    # contract §4: the loop revision this run executed, and whether an operator asked for it (run now).
    revision = models.PositiveIntegerField(default=1)
    manual = models.BooleanField(default=False)
    # contract §10: how the turn ended, from the host; the turn's error (if any) goes in `error`.
    outcome = models.CharField(max_length=10, choices=RunOutcome.choices, blank=True)
    summary = models.TextField(blank=True)
    outcome_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-scheduled_at"]
        indexes = [
            # GET /api/loops/{id}/runs: newest first per loop.
            models.Index(fields=["loop_id", "-scheduled_at"], name="run_loop_idx"),
            # The clock's recovery query and its sleep: open runs by retry_at.
            models.Index(fields=["retry_at"], condition=Q(status__in=["claimed", "delivering"]), name="run_open_idx"),
            # The count of fresh agents running (loops.runs.running_fresh_runs), at each claim of a `new` loop:
            # WHERE target = 'new' AND outcome = '' AND (open OR delivered since the run timeout).
            models.Index(fields=["finished_at"], condition=Q(target="new", outcome=""), name="run_fresh_idx"),
            # Whether a tool's caller is a session made for a `new` run (loops.selectors.
            # made_for_fresh_run, contract §15): only `new` runs write an entry here.
            models.Index(fields=["target_session_id"], condition=Q(target="new"), name="run_fresh_session_idx"),
            # Health's count of deliveries that failed lately (monitoring.gauges): failed runs only,
            # so a delivery that goes well writes no entry here.
            models.Index(fields=["finished_at"], condition=Q(status="failed"), name="run_failed_idx"),
        ]

    def __str__(self) -> str:
        return self.occurrence_key

    _prompt: str | None = None  # the revision's prompt, once read or given

    def save(self, *args, **kwargs) -> None:
        """A run given a prompt of its own (`run.prompt = …`: a run written for another revision
        than its loop's) stores it as its revision's, unless that revision's is stored already. A
        run at its loop's revision stores nothing: it reads the loop's prompt until the loop leaves
        that revision (keep_revision_prompt)."""
        adding = self._state.adding
        super().save(*args, **kwargs)
        if adding and self._prompt is not None:
            store_prompt(self.loop_id, self.revision, self._prompt)

    @property
    def prompt(self) -> str:
        """The prompt this run executed: its revision's (one query, the first time it is read)."""
        if self._prompt is None:
            self._prompt = revision_prompts({(self.loop_id, self.revision)}).get((self.loop_id, self.revision), "")
        return self._prompt

    @prompt.setter
    def prompt(self, value: str) -> None:
        self._prompt = value


class DeletedLoop(models.Model):
    """What is kept of a deleted loop for the runs that outlive it (spec §4: deleting a loop does not
    erase its run history): whom it targeted and its name, so that the runs it delivered into a
    session are still found and shown as a deleted loop's. Written by its deletion, in the same
    transaction; retention removes it with its last run (scheduler.retention)."""

    loop_id = models.CharField(max_length=40, primary_key=True)
    # The loop's target when it was deleted ("self" included): the runs delivered into a session
    # (loops.selectors.runs_delivered_into) are found through it, as a live loop's through its own.
    session_id = models.CharField(max_length=MAX_ID_CHARS)
    name = models.CharField(max_length=MAX_NAME_CHARS, blank=True)
    deleted_at = models.DateTimeField()

    class Meta:
        indexes = [
            # runs_delivered_into: WHERE session_id IN (…), as session_id's index serves live loops.
            models.Index(fields=["session_id"], name="deleted_loop_session_idx"),
        ]

    def __str__(self) -> str:
        return self.loop_id

    @classmethod
    def remember(cls, loop: Loop, *, at: datetime) -> None:
        """Keep the loop's target and name as it is deleted (call under its row lock)."""
        cls.objects.create(loop_id=loop.loop_id, session_id=loop.session_id, name=loop.name, deleted_at=at)


class LoopPrompt(models.Model):
    """The prompt of one revision of a loop, stored once for all its runs (a 100,000-character
    prompt copied into every run of a loop that fires every few seconds grew the database by
    megabytes a minute). Written when the loop leaves the revision (an edit) or goes (its deletion),
    if a run refers to it, so it outlives them as its runs do; while the loop is at the revision
    its runs read the loop's own prompt, so an occurrence writes none. Retention deletes it with the
    last run that refers to it (scheduler.retention), never while the loop is still at that revision."""

    pk = models.CompositePrimaryKey("loop_id", "revision")
    loop_id = models.CharField(max_length=40)
    revision = models.PositiveIntegerField()
    prompt = models.TextField()

    def __str__(self) -> str:
        return f"{self.loop_id} r{self.revision}"


def keep_revision_prompt(loop_id: str) -> None:
    """Store the prompt of the revision the loop is at, if a run refers to it; called as the loop
    leaves that revision (an edit) or goes (its deletion), with its row locked, so no run of the
    revision is made meanwhile. Until then its runs read the loop's own prompt: an occurrence
    writes no prompt, however many runs a revision has.

    One INSERT … SELECT: the prompt is copied inside the database (never sent back and forth),
    and a revision no run refers to (edited twice between runs) writes nothing."""
    prompts, loops, runs = LoopPrompt._meta.db_table, Loop._meta.db_table, LoopRun._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {prompts} (loop_id, revision, prompt) SELECT loop_id, revision, prompt FROM {loops} "
            f"WHERE loop_id = %s AND EXISTS (SELECT 1 FROM {runs} AS run "
            f"WHERE run.loop_id = {loops}.loop_id AND run.revision = {loops}.revision) "
            "ON CONFLICT DO NOTHING",
            [loop_id],
        )


def store_prompt(loop_id: str, revision: int, prompt: str) -> None:
    """Store one revision's prompt, unless stored already (the first stored is the revision's)."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {LoopPrompt._meta.db_table} (loop_id, revision, prompt) VALUES (%s, %s, %s) "
            "ON CONFLICT DO NOTHING",
            [loop_id, revision, prompt],
        )


def revision_prompts(pairs: set[tuple[str, int]]) -> dict[tuple[str, int], str]:
    """The prompts of these (loop_id, revision) pairs: stored once the loop left the revision
    (keep_revision_prompt), else the loop's own, while it is at that revision."""
    if not pairs:
        return {}
    found: dict[tuple[str, int], str] = {}
    stored = LoopPrompt.objects.filter(
        loop_id__in={pair[0] for pair in pairs}, revision__in={pair[1] for pair in pairs}
    )
    for loop_id, revision, prompt in stored.values_list("loop_id", "revision", "prompt"):
        if (loop_id, revision) in pairs:
            found[loop_id, revision] = prompt
    if missing := pairs - found.keys():
        for loop_id, revision, prompt in Loop.objects.filter(
            loop_id__in={loop_id for loop_id, _ in missing}
        ).values_list("loop_id", "revision", "prompt"):
            if (loop_id, revision) in missing:
                found[loop_id, revision] = prompt
    return found


class LoopEvent(models.Model):
    """One change to a loop (contract §9 audit trail). Outlives the loop (no foreign key)."""

    loop_id = models.CharField(max_length=40)
    at = models.DateTimeField()
    kind = models.CharField(max_length=12, choices=EventKind.choices)
    actor_kind = models.CharField(max_length=10, choices=ActorKind.choices)
    actor_id = models.CharField(max_length=MAX_ID_CHARS, blank=True)
    revision = models.PositiveIntegerField()
    # {field: [old, new]} for an edit, as JSON the API shows.
    changes = models.JSONField(null=True, blank=True)

    class Meta:
        indexes = [
            # GET /api/loops/{id}/events: newest first per loop.
            models.Index(fields=["loop_id", "-at", "-id"], name="event_loop_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.loop_id} {self.kind} r{self.revision}"
