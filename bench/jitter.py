"""The cron jitter's spread (contract §16, DSHLOOP_CRON_JITTER_SECONDS): 1,000 loops at `0 9 * * *`
with a 60 s jitter, their deliveries computed by the scheduler's own code (timing.jitter for each
loop's delay, timing.schedules for the delayed times), binned by second of the minute.

`python -m bench.jitter` rewrites its section of docs/BENCHMARKS.md (bench.report renders the same
section on a full run). Pure computation: no database, a second or two. The loop IDs have the form
loops.services.create.new_loop_id gives, drawn from a fixed seed so that the histogram is the same
on every run.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from datetime import UTC, datetime, timedelta

from bench.processes import BASE_DIR
from timing import schedules
from timing.jitter import jitter_delay

LOOPS = 1000
SPREAD_SECONDS = 60
DAYS = 7
BIN_SECONDS = 5
REPORT = BASE_DIR / "docs" / "BENCHMARKS.md"
START, END = "<!-- jitter: written by python -m bench.jitter -->", "<!-- /jitter -->"


def loop_ids(count: int = LOOPS, seed: int = 16) -> list[str]:
    rng = random.Random(seed)
    return [f"loop_{rng.getrandbits(64):016x}" for _ in range(count)]


def offsets(ids: list[str]) -> list[timedelta]:
    """Each loop's delay after 09:00, checked to be the same on each of DAYS days (its grid is regular)."""
    cron = schedules.Cron("0 9 * * *", "UTC")
    start = datetime(2026, 12, 7, 8, 0, tzinfo=UTC)
    found = []
    for loop_id in ids:
        timing = schedules.Delayed(cron, jitter_delay(loop_id, SPREAD_SECONDS))
        times = schedules.upcoming(timing, created_at=start, start=start, count=DAYS, host_tz="UTC")
        per_day = {moment - (start + timedelta(hours=1, days=day)) for day, moment in enumerate(times)}
        if len(per_day) != 1:
            raise AssertionError(f"{loop_id}'s offset changes from day to day: {sorted(per_day)}")
        found.append(per_day.pop())
    return found


def jitter_section() -> str:
    delays = offsets(loop_ids())
    bins = Counter(int(delay.total_seconds()) // BIN_SECONDS for delay in delays)
    per_second = Counter(int(delay.total_seconds()) for delay in delays)
    expected = LOOPS * BIN_SECONDS / SPREAD_SECONDS
    rows = ["| second of 09:00 | loops | |", "|---|---|---|"]
    for index in range(SPREAD_SECONDS // BIN_SECONDS):
        count = bins.get(index, 0)
        low = index * BIN_SECONDS
        rows.append(f"| {low:02d}–{low + BIN_SECONDS - 1:02d} | {count} | {'█' * round(count / 4)} |")
    return "\n".join(
        [
            START,
            "## Cron jitter: 1,000 loops at `0 9 * * *`, `DSHLOOP_CRON_JITTER_SECONDS=60`",
            "",
            f"Each loop's delivery after 09:00 ({BIN_SECONDS}-second bins), computed by the scheduler's own code "
            "(`timing.jitter.jitter_delay`, `timing.schedules.Delayed`) by `python -m bench.jitter`; each loop's "
            f"offset was the same on each of {DAYS} days. Without jitter all 1,000 fall due in the same second. "
            f"Expected per bin: {expected:.0f}; the busiest second holds {max(per_second.values())} "
            f"(mean {LOOPS / SPREAD_SECONDS:.1f}); every second of the minute has some: "
            f"{'yes' if len(per_second) == SPREAD_SECONDS else 'no'}.",
            "",
            *rows,
            END,
        ]
    )


def write(path=REPORT) -> None:
    """Replace the section in the report, or add it where bench.report renders it (before the findings)."""
    text = path.read_text()
    section = jitter_section()
    pattern = re.compile(re.escape(START) + ".*?" + re.escape(END), re.DOTALL)
    if pattern.search(text):
        text = pattern.sub(lambda _: section, text)
    else:
        anchor = "## Targets missed" if "## Targets missed" in text else "## Reproduce"
        text = text.replace(anchor, section + "\n\n" + anchor, 1)
    path.write_text(text)


if __name__ == "__main__":
    write()
    print(jitter_section())
