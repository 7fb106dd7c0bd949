"""The values a loop, a run and an event take, and the literals each API and page states through
them (a status, a state, who acted): one home, below the models that store them."""

from __future__ import annotations

from django.db import models


class LoopState(models.TextChoices):
    # Stored states. "overdue" (spec §4) is derived when the loop is read, from next_at and
    # the clock, so it can never be stale.
    SCHEDULED = "scheduled"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    # contract §9: an operator paused it; never claimed, no next_at, until resumed.
    PAUSED = "paused"


# The pause_reason of a `new` loop an agent made while DSHLOOP_APPROVE_AGENT_NEW_LOOPS is on: it waits
# for a person, and the resume that lets it run is recorded as their approval (EventKind.APPROVED).
AWAITING_APPROVAL = "awaiting approval"

# The pause_reason of a loop whose stored next_at names no moment (scheduler.stored_times): fixed, so
# that health finds such loops through loop_unreadable_idx. "auto: " as every scheduler pause.
UNREADABLE_REASON = "auto: its next run time (next_at) was not a timestamp; resume it to schedule it from now"


class Overlap(models.TextChoices):
    """contract §14: what an occurrence of a `new` loop does while its last run's turn still runs."""

    ALLOW = "allow"  # start another fresh session (spec: each occurrence creates one)
    SKIP = "skip"  # record the occurrence skipped; the next one tries again


class ScheduleKind(models.TextChoices):
    EVERY = "every"
    AFTER = "after"
    CRON = "cron"


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


class EventKind(models.TextChoices):
    CREATED = "created"
    EDITED = "edited"
    PAUSED = "paused"
    RESUMED = "resumed"
    RUN_NOW = "run_now"
    RETRIED = "retried"
    AUTO_PAUSED = "auto_paused"
    DELETED = "deleted"
    APPROVED = "approved"  # an operator's resume of a loop awaiting approval
    ENDED = "ended"  # contract §16: it reached its ends_at or max_runs and is completed


class ActorKind(models.TextChoices):
    SESSION = "session"  # an agent, through the tools
    USER = "user"  # a person: the panel, the admin, a management command
    TOKEN = "token"  # the operator REST API, by the token's name
    SCHEDULER = "scheduler"  # an automatic action
