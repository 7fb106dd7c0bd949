"""Where a loop ends (contract §16), said once: the rules every place that schedules, claims, records
or shows a loop applies. Pure: no Django.

A loop may have `ends_at` (an instant: its last occurrence is the last at or before it) and
`max_runs` (it ends once that many of its scheduled runs were delivered: `runs_delivered`). The
bounds are on delivery times, as `next_at` and `upcoming` show them (with a cron jitter, the delayed
ones). An occurrence after `ends_at` is none of the loop's; a loop with no occurrence left, or with
`max_runs` delivered, is completed with an `ended` event whose `changes` name the bound:
`{"ends_at": [ends_at, when it ended]}` or `{"max_runs": [max_runs, runs_delivered]}` (epoch ms).
"""

from __future__ import annotations

from datetime import datetime

from core.timeutil import to_ms

ENDS_AT = "ends_at"
MAX_RUNS = "max_runs"


def past_end(at: datetime | None, ends_at: datetime | None) -> bool:
    """Whether `at` (an occurrence's delivery time) falls after the loop's end: not an occurrence of it."""
    return at is not None and ends_at is not None and at > ends_at


def runs_reached(runs_delivered: int, max_runs: int | None) -> bool:
    """Whether a loop that has delivered this many runs has reached its max_runs."""
    return max_runs is not None and runs_delivered >= max_runs


def catch_up_until(now: datetime, ends_at: datetime | None) -> datetime:
    """The moment a catch-up looks up to (spec §3 anti-burst): the occurrences due by now, but none
    after the end, so a catch-up after downtime past `ends_at` delivers the last occurrence before it."""
    return now if ends_at is None else min(now, ends_at)


def bound_reached(
    *, next_at: datetime | None, ends_at: datetime | None, runs_delivered: int, max_runs: int | None
) -> str | None:
    """The bound that leaves a loop whose next delivery is `next_at` (None: none computed) with
    nothing more to run, or None while it goes on."""
    if runs_reached(runs_delivered, max_runs):
        return MAX_RUNS
    if ends_at is not None and (next_at is None or next_at > ends_at):
        return ENDS_AT
    return None


def ended_changes(
    bound: str, *, ends_at: datetime | None, max_runs: int | None, runs_delivered: int, now: datetime
) -> dict[str, list[int | None]]:
    """The `changes` of an `ended` event: the bound's name, with its value and what reached it."""
    if bound == MAX_RUNS:
        return {MAX_RUNS: [max_runs, runs_delivered]}
    return {ENDS_AT: [None if ends_at is None else to_ms(ends_at), to_ms(now)]}
