"""The cumulative counts behind GET /metrics (monitoring.metrics reads them): occurrences by
result, missed occurrences, and the delivery lateness histogram.

They are added to in the transactions that record the runs, once per batch (the scheduler's, and
an operator's change that records an occurrence it left undelivered: loops.services.unclaimed),
so they commit with the records and never go down when retention prunes runs. Each name is spread over SHARDS rows
(a batch picks one at random) and summed when read: schedulers recording at the same moment
seldom wait for one another's counter row.
"""

from __future__ import annotations

import random
from collections import Counter
from datetime import datetime

from django.db import connection

from loops.models import MetricCounter, RunStatus

# Several schedulers' workers record at once (2 each): with 32 rows a name, two batches that commit
# together meet on one about one time in 32 (measured: with 8, four runloops' deliveries waited for
# one another's counter rows a third of the burst).
SHARDS = 32
AFTER_INBOX_SHARD = 0  # the shard of the counts saved after inbox locks (Tally.save)
# Upper bounds in seconds: from a fast delivery (tenths of a second) to an hour-long outage.
LATENESS_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)
RESULTS = (RunStatus.DELIVERED, RunStatus.FAILED, RunStatus.SKIPPED)

MISSED = "missed"
TIMED_OUT = "timed_out"  # runs whose turn outlived DSHLOOP_RUN_TIMEOUT_SECONDS (contract §14)
LATENESS_COUNT = "lateness_count"
LATENESS_SUM_US = "lateness_sum_us"  # microseconds: integers add exactly


def occurrences_name(result: str) -> str:
    return f"occurrences_{result}"


def skipped_name(reason: str) -> str:
    """The counter of runs skipped for a contract §14 reason (overlap, capacity)."""
    return f"skipped_{reason}"


def notices_name(result: str) -> str:
    """The counter of failure notices by how they ended (delivered, skipped, failed; contract §16)."""
    return f"failure_notices_{result}"


def webhook_name(result: str) -> str:
    """The counter of failure webhook events by how they ended (sent, failed), or of its failed
    attempts (WEBHOOK_ATTEMPT_FAILED)."""
    return f"failure_webhook_{result}"


WEBHOOK_ATTEMPT_FAILED = "attempt_failed"


def bucket_name(index: int) -> str:
    """The counter of observations in bucket `index` alone (LATENESS_BUCKETS, then +Inf); the
    cumulative `le` counts Prometheus wants are summed when read."""
    return f"lateness_bucket_{index}"


def _bucket_of(seconds: float) -> int:
    for index, bound in enumerate(LATENESS_BUCKETS):
        if seconds <= bound:
            return index
    return len(LATENESS_BUCKETS)


class Tally:
    """What one batch adds: count its finished runs, then `save()` inside its transaction."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def finished(self, status: str, count: int = 1) -> None:
        if status in RESULTS and count:
            self.counts[occurrences_name(status)] += count

    def missed(self, count: int) -> None:
        if count:
            self.counts[MISSED] += count

    def skipped_for(self, reason: str) -> None:
        self.counts[skipped_name(reason)] += 1

    def notice(self, result: str) -> None:
        self.counts[notices_name(result)] += 1

    def webhook(self, result: str) -> None:
        self.counts[webhook_name(result)] += 1

    def timed_out(self) -> None:
        self.counts[TIMED_OUT] += 1

    def delivered_late(self, scheduled_at: datetime, now: datetime) -> None:
        lateness = max((now - scheduled_at).total_seconds(), 0.0)
        self.counts[bucket_name(_bucket_of(lateness))] += 1
        self.counts[LATENESS_COUNT] += 1
        self.counts[LATENESS_SUM_US] += round(lateness * 1_000_000)

    def save(self, *, after_inbox: bool = False) -> None:
        """One upsert for the batch; rows in name order, like every writer of them. `after_inbox`:
        the transaction holds inbox locks already (sessions_app.services.inbox_deliver_many).

        Those transactions take a shard of their own, which no other holds: the others save before
        any inbox lock or never take one, so none can hold a counter row one of these waits for
        while it waits for their inbox locks (no deadlocks)."""
        rows = sorted((name, value) for name, value in self.counts.items() if value)
        if not rows:
            return
        shard = AFTER_INBOX_SHARD if after_inbox else random.randrange(AFTER_INBOX_SHARD + 1, SHARDS)
        table = MetricCounter._meta.db_table
        with connection.cursor() as cursor:
            cursor.execute(
                f"INSERT INTO {table} (name, shard, value) VALUES {', '.join(['(%s, %s, %s)'] * len(rows))} "
                f"ON CONFLICT (name, shard) DO UPDATE SET value = {table}.value + excluded.value",
                [param for name, value in rows for param in (name, shard, value)],
            )
        self.counts.clear()


def read_counters() -> dict[str, int]:
    """Every counter's total over its shards (a few dozen rows)."""
    totals: Counter[str] = Counter()
    for name, value in MetricCounter.objects.values_list("name", "value"):
        totals[name] += value
    return dict(totals)
