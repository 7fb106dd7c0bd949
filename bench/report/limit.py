"""The physical limit's section: pgbench's claims per second, one claim or a batch per transaction."""

from __future__ import annotations

from bench.stats import over_reps

from .format import cell, table


def limit_section(results: dict, sizes: dict) -> str:
    data = results["sections"].get("limit")
    if not data:
        return ""
    rows = []
    for script, per_tx in (("claim_one.sql", "1"), ("claim_batch.sql", "100")):
        for clients in sizes["pgbench_clients"]:
            reps = data.get(f"{script}/{clients}", [])
            rows.append([per_tx, str(clients), cell(reps, "tps"), cell(reps, "claims_per_s"), cell(reps, "duplicates")])
    return (
        f"## Physical limit: pgbench\n\n`bench/pgbench/claim_one.sql` and `claim_batch.sql` on a "
        f"{sizes['pgbench_rows']:,}-row loop table (`bench/pgbench/schema.sql`), "
        f"{sizes['pgbench_seconds']} s per run, "
        "`pgbench -M prepared`. A claim locks the earliest due loop (`FOR UPDATE SKIP LOCKED`), moves its "
        "deadline and inserts a run row.\n\n"
        + table(["claims per transaction", "clients", "transactions/s", "claims/s", "duplicates"], rows)
    )


def batched_limit(results: dict) -> float | None:
    data = results["sections"].get("limit", {})
    best = [over_reps(reps, "claims_per_s")[0] for key, reps in data.items() if key.startswith("claim_batch")]
    best = [value for value in best if value is not None]
    return max(best) if best else None
