"""What processes spend, read from /proc: CPU seconds and resident memory."""

from __future__ import annotations

import os

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU of the processes, with their reaped children (/proc/<pid>/stat)."""
    ticks = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # exited between the listing and the read
        # After the command name: utime, stime, cutime, cstime are fields 14-17 of proc(5).
        ticks += sum(int(value) for value in fields[11:15])
    return ticks / CLOCK_TICKS


def postgres_pids() -> list[int]:
    """Every PostgreSQL server process on this machine (the bench databases share one server)."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/comm") as comm:
                    if comm.read().strip() == "postgres":
                        pids.append(int(entry))
            except OSError:
                continue
    return pids


def rss_bytes(pids: list[int]) -> int:
    """Resident memory of the processes, summed (/proc/<pid>/statm). Forked workers share
    some pages with their parent, so the sum over-counts shared pages the same way for both systems."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/statm") as statm:
                total += int(statm.read().split()[1]) * PAGE_SIZE
        except OSError:
            continue
    return total
