"""B1's section: the burst at one and at four scheduler processes, and where an occurrence goes."""

from __future__ import annotations

from bench.stats import over_reps

from .format import DQ, HEADER, cell, compared, duplicates_row, met, number, table
from .limit import batched_limit


def b1_section(results: dict, sizes: dict) -> str:
    data = results["sections"].get("B1")
    if not data:
        return ""
    limit = batched_limit(results)
    blocks = []
    for processes in sizes["b1_processes"]:
        ours, theirs = data.get(f"dshloop/{processes}", []), data.get(f"{DQ}/{processes}", [])
        rate = over_reps(ours, "rate")[0]
        rows = [
            compared(
                "occurrences/s, end to end",
                ours,
                theirs,
                "rate",
                target="≥ 5,000",
                verdict=met(rate, 5000, at_most=False),
            ),
            compared("seconds until all delivered", ours, theirs, "seconds"),
            compared("lateness p50 (s)", ours, theirs, "p50"),
            compared("lateness p99 (s)", ours, theirs, "p99"),
            [
                "delivered",
                cell(ours, "delivered"),
                cell(theirs, "delivered"),
                "",
                f"{sizes['b1_loops']:,}",
                met(over_reps(ours, "delivered")[0], sizes["b1_loops"], at_most=False),
            ],
            duplicates_row(ours, theirs),
        ]
        cpu_keys = ("scheduler_cpu_ms_per_1k", "server_cpu_ms_per_1k")
        if any(over_reps(ours, key)[0] is not None for key in cpu_keys):
            rows += [
                compared("scheduler CPU per 1,000 occurrences (ms)", ours, theirs, cpu_keys[0]),
                compared("PostgreSQL CPU per 1,000 occurrences (ms)", ours, theirs, cpu_keys[1]),
            ]
        if over_reps(ours, "rows_written_per_occurrence")[0] is not None:
            # pgbench's claim (the physical limit above) writes two: the loop and its run.
            rows.append(
                compared(
                    "rows written per occurrence (pgbench's claim: 2)", ours, theirs, "rows_written_per_occurrence"
                )
            )
            spent = sum(over_reps(ours, key)[0] or 0 for key in cpu_keys)
            if spent:
                # Both share the machine's cores: no schedule of the work beats cores ÷ CPU per occurrence.
                rows.append(
                    [
                        f"CPU ceiling on {results['machine']['cores']} cores (occurrences/s)",
                        number(results["machine"]["cores"] * 1e6 / spent),
                        "",
                        "",
                        "",
                        "",
                    ]
                )
        if limit and rate:
            rows.append(
                [
                    "share of the batched pgbench limit",
                    f"{rate / limit:.1%}",
                    "",
                    "",
                    "≥ 10%",
                    met(rate / limit, 0.10, at_most=False),
                ]
            )
        blocks.append(
            f"**{processes} scheduler process{'es' if processes > 1 else ''}** "
            f"(`runloops` × {processes} vs `qcluster` × {processes})\n\n" + table(HEADER, rows)
        )
    return (
        f"## B1 burst: {sizes['b1_loops']:,} due at one instant\n\n"
        "Every loop (`every` 1 h) or Schedule (`MINUTES` 60) falls due at the same instant, a few seconds "
        "after the schedulers are up. Time runs from that instant to each delivery record.\n\n"
        + "\n\n".join(blocks)
        + "\n\n"
        + B1_NOTES
    )


# Where a B1 occurrence's time goes and the decisions measured there, printed under every B1 table
# so that whoever reads the numbers has the explanation beside them.
B1_NOTES = (
    "**Where an occurrence goes.** A claim (`scheduler.claims.claim_due`) locks up to 500 due loops "
    "(`FOR UPDATE SKIP LOCKED`, 13 columns), computes each next deadline, moves the loops with one "
    "set-based UPDATE, inserts the runs with one INSERT and enqueues one django-q2 task per 250 runs, in "
    "one transaction. With the embedded host a delivery (`scheduler.delivery.deliver_runs`) is then one "
    "transaction: lock the runs and their loops, read their sessions, insert the inbox messages, and "
    "record the runs and loops in set-based UPDATEs; the row locks are the lease, so the separate "
    "lease-taking UPDATE of each run is gone, and a crash rolls the messages back with the records "
    "(`attempt` counts hand-outs, so a run whose driver keeps dying is still given up). The hot path "
    "reads rows, not model instances (`scheduler.rows`). Rows written per occurrence: the loop twice (claim, "
    "record), the run twice (insert, record), the message once, plus a task row per 250; the LIKE-only "
    "`_like` indexes Django adds on PostgreSQL and the run table's redundant `loop_id` index are dropped "
    "(a run has 4 indexes instead of 8). Measured in-process before → after these changes, per "
    "occurrence: claim 87 → 63 µs, delivery 200 → 130 µs of Python CPU, PostgreSQL 190 → 155 µs. "
    "**Decisions.** PostgreSQL server-side binding (`server_side_binding`): no gain measured (Python "
    "CPU 199–213 µs with it, 196–208 without; PostgreSQL 160–164 vs 154–156), because the batch "
    "statements already bind on the server through `core.bulk`'s arrays: left off. The log line per "
    "occurrence costs about 13 µs of the scheduler's CPU (measured with the logger silenced): kept, "
    "because operators search these lines (DSHLOOP_LOG_FORMAT=json makes them JSON)."
)
