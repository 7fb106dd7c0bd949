"""B1's section: the burst at one and at four scheduler processes, and where an occurrence goes."""

from __future__ import annotations

from bench.stats import over_reps

from .format import DQ, HEADER, cell, compared, duplicates_row, met, number, table
from .limit import batched_limit

# Issue 37's targets for B1 (reported, never asserted in tests).
TIMES_DJANGO_Q2 = 35  # one runloops against one qcluster, in the same run
MAX_ROWS = 4.0  # rows written per occurrence
MAX_CPU_US = 250.0  # CPU per occurrence, scheduler and PostgreSQL together


def _with_cpu_total(reps: list[dict]) -> list[dict]:
    """Each repetition with its CPU per occurrence, scheduler and PostgreSQL together (µs: the
    per-1,000 figures in ms are µs per occurrence)."""
    keys = ("scheduler_cpu_ms_per_1k", "server_cpu_ms_per_1k")
    return [
        {**rep, "cpu_us_per_occurrence": sum(rep[key] for key in keys)}
        if all(rep.get(k) is not None for k in keys)
        else rep
        for rep in reps
    ]


def b1_section(results: dict, sizes: dict) -> str:
    data = results["sections"].get("B1")
    if not data:
        return ""
    limit = batched_limit(results)
    one_process_rate = over_reps(data.get("dshloop/1", []), "rate")[0]
    blocks = []
    for processes in sizes["b1_processes"]:
        ours, theirs = _with_cpu_total(data.get(f"dshloop/{processes}", [])), data.get(f"{DQ}/{processes}", [])
        rate, their_rate = over_reps(ours, "rate")[0], over_reps(theirs, "rate")[0]
        if processes == 1:
            target, verdict = (
                f"≥ ×{TIMES_DJANGO_Q2} django-q2",
                met(rate / their_rate if rate and their_rate else None, TIMES_DJANGO_Q2, at_most=False),
            )
        else:
            target, verdict = "≥ 1 process's", met(rate, one_process_rate, at_most=False)
        rows = [
            compared("occurrences/s, end to end", ours, theirs, "rate", target=target, verdict=verdict),
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
                [
                    "CPU per occurrence, scheduler + PostgreSQL (µs)",
                    cell(ours, "cpu_us_per_occurrence"),
                    "",
                    "",
                    f"≤ {MAX_CPU_US:.0f}",
                    met(over_reps(ours, "cpu_us_per_occurrence")[0], MAX_CPU_US, at_most=True),
                ],
            ]
        if over_reps(ours, "rows_written_per_occurrence")[0] is not None:
            # pgbench's claim (the physical limit above) writes two: the loop and its run.
            rows.append(
                compared(
                    "rows written per occurrence (pgbench's claim: 2)",
                    ours,
                    theirs,
                    "rows_written_per_occurrence",
                    target=f"≤ {MAX_ROWS:.0f}",
                    verdict=met(over_reps(ours, "rows_written_per_occurrence")[0], MAX_ROWS, at_most=True),
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
            f"(`runloops` × {processes} vs `qcluster` × {processes})\n\n"
            + table(HEADER, rows)
            + _rows_by_table(ours, theirs)
            + _waits(ours)
        )
    return (
        f"## B1 burst: {sizes['b1_loops']:,} due at one instant\n\n"
        "Every loop (`every` 1 h) or Schedule (`MINUTES` 60) falls due at the same instant, a few seconds "
        "after the schedulers are up. Time runs from that instant to each delivery record.\n\n"
        + "\n\n".join(blocks)
        + "\n\n"
        + B1_NOTES
    )


def _rows_by_table(ours: list[dict], theirs: list[dict]) -> str:
    """Where the rows written go: each table's inserts, updates (HOT among them) and deletes per
    occurrence (pg_stat_user_tables; the first repetition: these counts are the same in every one)."""
    blocks = []
    for name, reps in (("dshloop", ours), (DQ, theirs)):
        tables = next((rep["rows_by_table"] for rep in reps if rep.get("rows_by_table")), None)
        if not tables:
            continue
        rows = [
            [f"`{table_name}`", *(f"{counts[key]:.3g}" for key in ("ins", "upd", "hot", "del"))]
            for table_name, counts in tables.items()
        ]
        header = [f"{name}: per occurrence", "inserted", "updated", "of those HOT", "deleted"]
        blocks.append(table(header, rows))
    if not blocks:
        return ""
    return (
        "\n\nRows written by table (`pg_stat_user_tables` deltas over the burst; the loop table's inserts "
        "are the set-up's own, 1 per occurrence, left out of the total above):\n\n" + "\n\n".join(blocks)
    )


def _waits(ours: list[dict]) -> str:
    """What dshloop's active backends waited for during the burst (bench.waits), and which of the
    schedulers' processes spent their CPU; first repetition."""
    roles = next(
        (rep["scheduler_cpu_ms_per_1k_by_role"] for rep in ours if rep.get("scheduler_cpu_ms_per_1k_by_role")), None
    )
    spent = (
        "\n\nThe schedulers' CPU per occurrence by process (µs, all schedulers together): "
        + ", ".join(f"{role} {value:.0f}" for role, value in roles.items())
        + "."
        if roles
        else ""
    )
    waits = next((rep["waits"] for rep in ours if rep.get("waits")), None)
    if not waits or not waits["active"]:
        return spent
    states = ", ".join(f"{name} {share:.2f}" for name, share in waits["active"].items() if share >= 0.005)
    locks = "; ".join(f"`{name}` {share:.2f}" for name, share in waits["lock_waits"].items() if share >= 0.005)
    return (
        f"\n\nBackends of dshloop's database running a statement, on average over {waits['samples']:,} samples "
        f"(every 10 ms, from just before the burst to its last delivery), by what they waited for: {states}."
        + (f" Waiting for a lock, by statement: {locks}." if locks else "")
        + spent
    )


# Where a B1 occurrence's time goes and the decisions measured there, printed under every B1 table
# so that whoever reads the numbers has the explanation beside them.
B1_NOTES = (
    "**Where an occurrence goes.** A clock's claim (`scheduler.claims.claim_due`) locks up to 500 due "
    "loops (`FOR UPDATE SKIP LOCKED`), computes each next deadline and, on a host whose writes are rows "
    "of this database (`Capabilities.transactional`: the embedded host), takes the delivery path's own "
    "steps in the same transaction (resolve, `scheduler.prepare`; record, `scheduler.records`; deliver "
    "last): it inserts each run once, already recorded, moves and records each loop in one set-based "
    "UPDATE (next deadline, last result, `runs_delivered`), and inserts the inbox messages last (their "
    "`seq` taken in the INSERT under a per-session lock held to the commit). So an occurrence writes "
    "three rows: the loop once, the run once, the message once, plus a metric-counter upsert per batch; "
    "no task row and no hop to a worker. A message the database refuses, or an occurrence that has a "
    "run already, undoes the claim's deliveries to a savepoint and enqueues the batch for a worker "
    "instead (one django-q2 task per 250 runs), which takes the same steps. A claim that comes back "
    "full is a burst: a clock that is the one live scheduler asks a task worker to claim beside it "
    "(`claims.claim_burst`, the same claim), so that one claimer's Python runs while the other waits "
    "for PostgreSQL; four schedulers claim side by side already and ask for no helper. Measured side "
    "by side (B1, three repetitions, this machine): one `runloops` 5,281–5,467/s before the claim "
    "delivered itself, 5,528–5,661/s with it, 9,349–10,641/s with the helper; CPU per occurrence "
    "206 + 151 µs before, 124 + 78 µs after. With one path (issue 42; one repetition each, back to back "
    "on a machine shared with another benchmark): 5,565/s before (django-q2 176/s in its run: ×31.7), "
    "5,596/s after (django-q2 162/s: ×34.5; CPU 130 µs an occurrence, 3.013 rows); at quieter moments "
    "8,454/s before (×50.0) and 9,797/s after (×55.0, CPU 135 + 76 µs an occurrence); without the helper 4,892/s against "
    "django-q2's 169/s (×28.9), and 5,429–5,613/s with a helper thread in the clock's own process "
    "instead (bound by the GIL): the helper stays. "
    "The hot path reads rows, not model instances, where it can (`scheduler.rows`; the claim still "
    "reads its loops as instances). "
    "**Decisions.** PostgreSQL server-side binding (`server_side_binding`): no gain measured, because "
    "the batch statements already bind on the server through `core.bulk`'s arrays: left off. The log "
    "line per occurrence costs about 13 µs of the scheduler's CPU (measured with the logger silenced): "
    "kept, because operators search these lines (DSHLOOP_LOG_FORMAT=json makes them JSON)."
)
