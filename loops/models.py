"""The durable loop registry (spec §4, §5) and its run history."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from . import schedules


class LoopState(models.TextChoices):
    # Stored states. "overdue" (spec §4) is derived when the loop is read, from next_at and
    # the clock, so it can never be stale.
    SCHEDULED = "scheduled"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    # contract §9: an operator paused it; never claimed, no next_at, until resumed.
    PAUSED = "paused"


# The pause_reason of a loop whose stored next_at names no moment (loops.stored_times): fixed, so
# that health finds such loops through loop_unreadable_idx. "auto: " as every scheduler pause.
UNREADABLE_REASON = "auto: its next run time (next_at) was not a timestamp; resume it to schedule it from now"


class ScheduleKind(models.TextChoices):
    EVERY = "every"
    AFTER = "after"
    CRON = "cron"


class Loop(models.Model):
    loop_id = models.CharField(max_length=40, primary_key=True)
    prompt = models.TextField()
    kind = models.CharField(max_length=5, choices=ScheduleKind.choices)
    every_seconds = models.BigIntegerField(null=True, blank=True)
    after_seconds = models.BigIntegerField(null=True, blank=True)
    cron_expr = models.CharField(max_length=200, blank=True)
    tz = models.CharField(max_length=64, blank=True, help_text="Only when supplied; else the host TIME_ZONE.")
    # The execution target: "self", "new" or an actual session ID (spec §2.1).
    session_id = models.CharField(max_length=255, db_index=True)
    preset = models.CharField(max_length=255, blank=True, help_text='Only for session_id "new".')
    # Empty when there was no caller and no global interface to record (a panel loop; issue 12).
    created_by_session_id = models.CharField(max_length=255, blank=True)
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
    name = models.CharField(max_length=120, blank=True)
    revision = models.PositiveIntegerField(default=1)
    paused_at = models.DateTimeField(null=True, blank=True)
    pause_reason = models.CharField(max_length=200, blank=True)
    consecutive_failures = models.PositiveIntegerField(default=0)
    # Where the schedule's grid starts: creation, or the last edit of its schedule or target
    # (issue 15: "recomputes next_at from the edit time"). Null: created_at.
    schedule_from = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["next_at", "created_at"]
        indexes = [
            # The clock's query "earliest due scheduled loop": WHERE state='scheduled' AND
            # next_at <= now ORDER BY next_at LIMIT n, and the sleep query (MIN next_at).
            models.Index(fields=["next_at"], condition=Q(state="scheduled"), name="loop_due_idx"),
            models.Index(fields=["created_at"], name="loop_created_idx"),
            # loop_list and the panel's list (selectors._ordered): WHERE state <> 'completed' ORDER BY
            # next_at (NULLS LAST: PostgreSQL's ascending order), created_at, loop_id [LIMIT n]; each
            # keyset page of selectors.loop_rows is a range scan on it (issue 17).
            models.Index(
                fields=["next_at", "created_at", "loop_id"], condition=~Q(state="completed"), name="loop_list_idx"
            ),
            # The quota count for "new"/"self" loops (selectors.active_loops_in_quota):
            # WHERE created_by_session_id = X AND session_id IN ('new', 'self') AND state <> 'completed'.
            models.Index(fields=["created_by_session_id", "session_id"], name="loop_creator_idx"),
            # Health's count of loops set aside for an unreadable next_at (loops.gauges); empty
            # unless something wrote such a row.
            models.Index(
                fields=["loop_id"],
                condition=Q(state="paused", pause_reason=UNREADABLE_REASON),
                name="loop_unreadable_idx",
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
        if self.kind == ScheduleKind.EVERY:
            return schedules.Every(self.every_seconds)
        if self.kind == ScheduleKind.AFTER:
            return schedules.After(self.after_seconds)
        return schedules.Cron(self.cron_expr, self.tz or None)


class RunOutcome(models.TextChoices):
    """How the turn a delivery started ended, as its host reports it (contract §10)."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


class RunStatus(models.TextChoices):
    CLAIMED = "claimed"
    DELIVERING = "delivering"
    DELIVERED = "delivered"
    FAILED = "failed"
    # Never delivered, on purpose: its occurrence already had a run (the reason is in `error`).
    SKIPPED = "skipped"


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
    # Snapshots, so history explains itself after the loop changes or is deleted.
    prompt = models.TextField(blank=True)
    target = models.CharField(max_length=255, blank=True, help_text="The loop's target when claimed.")
    target_session_id = models.CharField(max_length=255, blank=True)
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
        ]

    def __str__(self) -> str:
        return self.occurrence_key


class SchedulerHeartbeat(models.Model):
    """One row per running `runloops` process, refreshed as its clock ticks (contract §4)."""

    instance_id = models.CharField(max_length=64, primary_key=True)
    hostname = models.CharField(max_length=255)
    pid = models.PositiveIntegerField()
    started_at = models.DateTimeField()
    last_tick_at = models.DateTimeField(db_index=True)

    def __str__(self) -> str:
        return f"{self.hostname}:{self.pid}"


class EventKind(models.TextChoices):
    CREATED = "created"
    EDITED = "edited"
    PAUSED = "paused"
    RESUMED = "resumed"
    RUN_NOW = "run_now"
    RETRIED = "retried"
    AUTO_PAUSED = "auto_paused"
    DELETED = "deleted"


class ActorKind(models.TextChoices):
    SESSION = "session"  # an agent, through the tools
    USER = "user"  # a person: the panel, the admin, a management command
    TOKEN = "token"  # the operator REST API, by the token's name
    SCHEDULER = "scheduler"  # an automatic action


class LoopEvent(models.Model):
    """One change to a loop (contract §9 audit trail). Outlives the loop (no foreign key)."""

    loop_id = models.CharField(max_length=40)
    at = models.DateTimeField()
    kind = models.CharField(max_length=12, choices=EventKind.choices)
    actor_kind = models.CharField(max_length=10, choices=ActorKind.choices)
    actor_id = models.CharField(max_length=255, blank=True)
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


class MetricCounter(models.Model):
    """A cumulative count for GET /metrics (issue 18): occurrences by result, missed ones, the
    lateness histogram. Counted in the transactions that record the runs, so it never goes
    down when retention prunes them. Each name is spread over a few shards, summed when read:
    schedulers recording at the same time seldom wait for one another's row."""

    name = models.CharField(max_length=40)
    shard = models.PositiveSmallIntegerField()
    value = models.BigIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["name", "shard"], name="metric_counter_shard_uniq")]

    def __str__(self) -> str:
        return f"{self.name}[{self.shard}]={self.value}"
