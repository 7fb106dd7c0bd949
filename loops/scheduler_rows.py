"""The scheduler's own rows, in the loops app's tables where they were made (its migrations): its
processes' heartbeats, the metric counters its records count into, and the failure episodes it
delivers notices and webhooks from."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from core.limits import MAX_ID_CHARS


class SchedulerHeartbeat(models.Model):
    """One row per running `runloops` process, refreshed as its clock ticks (contract §4)."""

    instance_id = models.CharField(max_length=64, primary_key=True)
    hostname = models.CharField(max_length=255)
    pid = models.PositiveIntegerField()
    started_at = models.DateTimeField()
    last_tick_at = models.DateTimeField(db_index=True)

    def __str__(self) -> str:
        return f"{self.hostname}:{self.pid}"


class MetricCounter(models.Model):
    """A cumulative count for GET /metrics: occurrences by result, missed ones, the
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


class FailureEvent(models.TextChoices):
    """contract §16: what a failure episode was (the webhook's `event`)."""

    LOOP_AUTO_PAUSED = "loop_auto_paused"  # a recurring loop paused itself after failures in a row
    RUN_FAILED = "run_failed"  # a run of a `new` loop failed or timed out


class NoticeStatus(models.TextChoices):
    PENDING = "pending"
    DELIVERED = "delivered"
    SKIPPED = "skipped"  # no session to tell: the creator is gone and there is no global interface
    FAILED = "failed"  # the host refused it, or kept failing until the attempts ran out


class WebhookStatus(models.TextChoices):
    PENDING = "pending"
    SENT = "sent"
    FAILED = "failed"  # not taken within DSHLOOP_FAILURE_WEBHOOK_RETRY_SECONDS


class FailureEpisode(models.Model):
    """One failure episode (contract §16) and what is owed for it: a notice into a session and a
    POST to the operators' webhook. Written in the transaction that records the failure or the
    auto-pause, so that it exists exactly when they do (an outbox); delivered from here by the
    scheduler's threads, each channel on its own. Outlives the loop (no foreign key)."""

    # "<loop_id>@notice:<run_id>": one episode per failing run, and the notice's occurrence key,
    # by which a host keeps one message however often a delivery is retried.
    key = models.CharField(max_length=120, primary_key=True)
    loop_id = models.CharField(max_length=40)
    run_id = models.CharField(max_length=40)
    event = models.CharField(max_length=20, choices=FailureEvent.choices)
    at = models.DateTimeField()
    error = models.TextField(blank=True)
    consecutive_failures = models.PositiveIntegerField(default=0)
    # Snapshots of the loop, so that the notice says what failed after the loop changes or goes.
    loop_summary = models.CharField(max_length=200, blank=True)
    target = models.CharField(max_length=MAX_ID_CHARS, blank=True)
    failed_session_id = models.CharField(max_length=MAX_ID_CHARS, blank=True)
    creator_session_id = models.CharField(max_length=MAX_ID_CHARS, blank=True)
    # The notice: "" when none is owed (DSHLOOP_FAILURE_NOTICES=0). While pending, notice_due_at is
    # when it is tried next (pushed out by a lease while a driver tries it).
    notice_status = models.CharField(max_length=10, choices=NoticeStatus.choices, blank=True)
    notice_due_at = models.DateTimeField(null=True, blank=True)
    notice_attempts = models.PositiveIntegerField(default=0)
    notice_session_id = models.CharField(max_length=MAX_ID_CHARS, blank=True)
    notice_error = models.TextField(blank=True)
    # The webhook: "" when none was configured.
    webhook_status = models.CharField(max_length=10, choices=WebhookStatus.choices, blank=True)
    webhook_due_at = models.DateTimeField(null=True, blank=True)
    webhook_attempts = models.PositiveIntegerField(default=0)
    webhook_error = models.TextField(blank=True)

    class Meta:
        indexes = [
            # The notice sender's query: pending notices by due time (scheduler.failure_notices).
            models.Index(fields=["notice_due_at"], condition=Q(notice_status="pending"), name="episode_notice_idx"),
            # The webhook sender's query: pending events by due time (scheduler.failure_webhook).
            models.Index(fields=["webhook_due_at"], condition=Q(webhook_status="pending"), name="episode_webhook_idx"),
        ]

    def __str__(self) -> str:
        return self.key
