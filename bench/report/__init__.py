"""docs/BENCHMARKS.md from one run's results: machine facts, then one table per benchmark with
dshloop, django-q2, their ratio, the target and whether it was met.

Every number is the median over repetitions; with more than one repetition the range
(min–max) follows it in brackets.
"""

from __future__ import annotations

from ..jitter import jitter_section
from .burst import b1_section
from .findings import findings
from .idle import b3_section
from .limit import limit_section
from .machine import machine_section
from .previous import previous_section
from .scale import b4_section
from .steady import b2_section


def render(results: dict) -> str:
    sizes = results["sizes"]
    parts = ["# Benchmarks"]
    if results.get("quick"):
        parts.append(
            "> **Quick, noisy run — not the benchmark.** Produced by `python -m bench.run --quick` "
            "(`make bench QUICK=1`) with tiny sizes and one repetition, while other test suites ran on "
            "the same two cores. It shows the harness works and the shape of the comparison, no more: at "
            "these sizes fixed delays dominate B1 (django-q2's ~30 s scheduler cycle, dshloop's start of a "
            "batch), and B2's window is shorter than django-q2's one-minute period. Replace it with a full "
            "`make bench` on a quiet machine."
        )
    parts.append(
        "dshloop (`manage.py runloops`) and its peer, django-q2's own `Schedule` + `manage.py qcluster` "
        "(`bench/baseline_settings.py`: ORM broker, `catch_up=False`, `CONN_MAX_AGE=60`, `save_limit=-1`, the same "
        "`workers`/`queue_limit`/`bulk`/`poll` as dshloop's `Q_CLUSTER`), run in the same `python -m bench.run` "
        "on the same PostgreSQL, each in its own database, interleaved repetition by repetition. Schedulers are "
        "real processes started as an operator would and stopped with SIGTERM; rows are bulk-inserted and "
        "ANALYZEd. Both do the same work per occurrence: dshloop delivers to a session inbox on its embedded host "
        "and records the run; django-q2 runs `bench.tasks.record`, which records the run. End to end = scheduled "
        "instant → delivery record (dshloop `LoopRun.finished_at`; the task's recorded time). Duplicates = the same "
        "occurrence recorded twice. Ratios are dshloop ÷ django-q2 on the medians."
    )
    for section in (
        machine_section(results),
        previous_section(results),
        limit_section(results, sizes),
        b1_section(results, sizes),
        b2_section(results, sizes),
        b3_section(results, sizes),
        b4_section(results, sizes),
        jitter_section(),
        findings(results, sizes),
    ):
        if section:
            parts.append(section)
    parts.append(
        "## Reproduce\n\n    make bench            # full size, ~65 min; then B5 where a DSH is installed, ~60 min\n"
        "    make bench QUICK=1    # tiny sizes, ~8 min: checks the harness\n"
        "    make bench DSH=1      # B5 alone\n\n"
        "B5 spends most of its time in DSH making each round's fresh sessions (rc.8 rewrites its whole "
        "projection cache on each create: about one every two seconds in a profile of 5,000); it needs the `zstd` "
        "command to write the cold profile. Smaller sizes: `make bench DSH=1 BENCH_ARGS='--dsh-profiles 100 "
        "--dsh-poll-profile 1000'`.\n\n"
        "Raw numbers per repetition and scheduler logs: `var/bench/<date>/`."
    )
    return "\n\n".join(parts) + "\n"
