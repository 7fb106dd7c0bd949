"""The closing section: for each benchmark that missed a target in this run, what bounds it and
what would move it."""

from __future__ import annotations

from bench.stats import over_reps

from .burst import MAX_CPU_US, MAX_ROWS, TIMES_DJANGO_Q2
from .format import DQ

# What to make of a missed target. Written from the code's structure, not from one run's numbers:
# each says what bounds the measure and what would move it.
WHEN_MISSED = {
    "B1": "**B1.** The burst is bound by CPU: the CPU rows above are what the schedulers' processes and "
    "the PostgreSQL server spend per occurrence, and on cores shared by both no arrangement of the work "
    "beats the CPU ceiling row. Lock waits are small (the backends' waits are under each table: the inbox "
    "lock a delivery holds for its messages' INSERT and commit is what several schedulers still queue "
    "for). Rows written: three an occurrence (on the embedded host a claim delivers and records its runs in "
    "its own transaction: the loop, the run and the message, each once). One `runloops` claims with a task "
    "worker beside it (claim_burst); several claim side by side, each a transaction and a process of its "
    "own on the same two cores, so past the cores' ceiling more schedulers add switching, not speed. What "
    "would move it from here: reading the claimed loops as rows instead of model instances, reading the "
    "hot path's timestamps as integers (psycopg's timestamp loader is Python code, about 2 µs a value), and "
    "batching the log line per occurrence.",
    "B2": "**B2 lateness.** A delivery waits for the clock to wake (a timer on the earliest deadline, at least "
    "`MIN_SLEEP` 50 ms apart), the claim to commit, the pusher to be woken by NOTIFY, a worker to take the "
    "task and the batch to be delivered and recorded. On a loaded two-core machine each hand-off between "
    "processes costs scheduling delay; p99 reflects the busiest moments.",
    "B3": "**B3 idle cost.** An idle `runloops` wakes every `MAX_SLEEP` (30 s): heartbeat UPDATE (every 25 s), "
    "the two `next_wakeup` MIN() queries, and the pusher's look at the queue every `IDLE_RECHECK` (30 s): "
    "about nine transactions a minute. Its CPU floor is in Python wake-ups, not SQL: django-q2's guard "
    "(sentinel) process wakes twice a second to check its processes and save its status, and psycopg "
    "polls each of the two waiting LISTEN connections (clock and pusher) every 0.1 s "
    "(`psycopg.connection._WAIT_INTERVAL`), about 0.15 CPU-s/min each measured alone. Fewer wake-ups "
    "(one listener per process, waiting on the socket with `select()` instead of `notifies(timeout=…)`, "
    "a longer guard cycle) would lower it.",
    "B4": "**B4.** RSS can grow with the table only if something holds per-loop state (the clock keeps none: "
    "it asks PostgreSQL for the earliest deadline); loop_create is one INSERT plus validation, target "
    "resolution (a session lookup) and a NOTIFY at commit, so a slow p99 there is the machine's or the "
    "database's, and shows in the due-query times too. RSS against qcluster: `runloops` loads only "
    "the apps it runs and imports the clock, housekeeping and delivery path only in the processes that use "
    "them, after the cluster forks; before the fork the two are level (about 52 MiB each), and main plus "
    "sentinel (dshloop's clock and housekeeping run in its main process, qcluster's scheduler in its "
    "sentinel) are even. What is left is in the workers: qcluster's are recycled after 500 tasks, and its "
    "burst is 1,000 one-occurrence tasks, so they are measured freshly forked, having run nothing (3.1 MiB "
    "of the gap; measured with recycling off, qcluster's tree is 279.9 MiB), and each dshloop worker holds "
    "the delivery code it runs (about 0.75 MiB). Recycling dshloop's workers as often would hide that in the "
    "number without saving memory.",
}


def b1_missed(b1: dict) -> bool:
    """Whether B1 missed one of its targets (bench.report.burst): the rate against django-q2's and
    against one process's, rows written and CPU per occurrence."""

    def median(key: str, field: str) -> float:
        return over_reps(b1.get(key, []), field)[0] or 0.0

    one, theirs, four = median("dshloop/1", "rate"), median(f"{DQ}/1", "rate"), median("dshloop/4", "rate")
    cpu = median("dshloop/1", "scheduler_cpu_ms_per_1k") + median("dshloop/1", "server_cpu_ms_per_1k")
    return (
        (theirs > 0 and one / theirs < TIMES_DJANGO_Q2)
        or ("dshloop/4" in b1 and four < one)
        or median("dshloop/1", "rows_written_per_occurrence") > MAX_ROWS
        or cpu > MAX_CPU_US
    )


def findings(results: dict, sizes: dict) -> str:
    """The WHEN_MISSED paragraphs of the benchmarks that missed a target in this run."""
    sections = results["sections"]
    missed = []
    b1 = sections.get("B1", {})
    if b1 and b1_missed(b1):
        missed.append("B1")
    b2 = sections.get("B2", {})
    if any((over_reps(b2.get(key, []), "p99")[0] or 0) > 0.250 for key in ("dshloop", "dshloop/heavy")):
        missed.append("B2")
    b3 = sections.get("B3", {}).get("dshloop", [])
    if b3 and ((over_reps(b3, "transactions_per_min")[0] or 0) > 10 or (over_reps(b3, "cpu_percent")[0] or 0) > 1):
        missed.append("B3")
    b4 = sections.get("B4", {})
    rss = [over_reps(b4.get(f"dshloop/{size}/rss", []), "rss_mb")[0] for size in sizes["b4_sizes"]]
    rss = [value for value in rss if value]
    api = b4.get(f"dshloop/{sizes['b4_api_size']}/api", [])
    heavier = any(
        (over_reps(b4.get(f"dshloop/{size}/rss", []), "rss_mb")[0] or 0)
        > (over_reps(b4.get(f"{DQ}/{size}/rss", []), "rss_mb")[0] or float("inf"))
        for size in sizes["b4_sizes"]
    )
    if (len(rss) > 1 and max(rss) / min(rss) - 1 > 0.10) or (over_reps(api, "create_p99")[0] or 0) > 20 or heavier:
        missed.append("B4")
    if not missed:
        return ""
    return "## Targets missed in this run, and why\n\n" + "\n\n".join(WHEN_MISSED[key] for key in missed)
