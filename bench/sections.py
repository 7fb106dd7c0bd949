"""The sections of `python -m bench.run`, each repetition of each system in turn (dshloop, django-q2,
dshloop, …) so that machine noise hits both alike; every result is saved as it comes."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from .burst import burst
from .harness import log
from .idle import idle
from .limit import pgbench
from .scale import api_latency, due_query_ms, grow, resident
from .scrape import scrape_cost
from .servers import schedulers
from .sizes import Sizes
from .steady import steady
from .systems import Baseline, Dshloop


class Run:
    """One bench run: the systems, where logs and raw results go, and the results so far."""

    def __init__(self, sizes: Sizes, quick: bool, out_dir: Path):
        self.sizes, self.out_dir = sizes, out_dir
        self.systems = [Dshloop(), Baseline()]
        self.results: dict = {"quick": quick, "sizes": asdict(sizes), "sections": {}}

    def record(self, section: str, key: str, value: dict) -> None:
        """Keep one repetition's numbers, and save everything so far (a crash loses little)."""
        self.results["sections"].setdefault(section, {}).setdefault(key, []).append(value)
        log(
            f"  {section} {key}: "
            + ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in value.items())
        )
        (self.out_dir / "results.json").write_text(json.dumps(self.results, indent=1, default=str))

    def logs(self, section: str, rep: int) -> Path:
        return self.out_dir / "logs" / f"{section}-rep{rep + 1}"

    def limit(self) -> None:
        for _rep in range(self.sizes.reps):
            for script in ("claim_one.sql", "claim_batch.sql"):
                for clients in self.sizes.pgbench_clients:
                    self.record(
                        "limit",
                        f"{script}/{clients}",
                        pgbench(
                            script=script,
                            clients=clients,
                            seconds=self.sizes.pgbench_seconds,
                            rows=self.sizes.pgbench_rows,
                        ),
                    )

    def b1(self) -> None:
        for rep in range(self.sizes.reps):
            for processes in self.sizes.b1_processes:
                for system in self.systems:
                    self.record(
                        "B1",
                        f"{system.name}/{processes}",
                        burst(
                            system,
                            loops=self.sizes.b1_loops,
                            processes=processes,
                            log_dir=self.logs("B1", rep),
                            label=f"{processes}p",
                        ),
                    )

    def b2(self) -> None:
        for rep in range(self.sizes.reps):
            for system in self.systems:
                self.record(
                    "B2",
                    system.name,
                    steady(
                        system,
                        loops=self.sizes.b2_loops,
                        period_s=self.sizes.b2_period_s,
                        seconds=self.sizes.b2_seconds,
                        log_dir=self.logs("B2", rep),
                        label="steady",
                    ),
                )
            # Five times the load, dshloop alone: django-q2 cannot repeat a schedule faster than a
            # minute, and at this many schedules its one-minute cycle would not keep up (B1).
            dshloop = self.systems[0]
            self.record(
                "B2",
                f"{dshloop.name}/heavy",
                steady(
                    dshloop,
                    loops=self.sizes.b2_heavy_loops,
                    period_s=self.sizes.b2_period_s,
                    seconds=self.sizes.b2_seconds,
                    log_dir=self.logs("B2", rep),
                    label="heavy",
                ),
            )

    def b3(self) -> None:
        for rep in range(self.sizes.reps):
            for system in self.systems:
                self.record(
                    "B3",
                    system.name,
                    idle(
                        system,
                        loops=self.sizes.b3_loops,
                        seconds=self.sizes.b3_seconds,
                        log_dir=self.logs("B3", rep),
                        label="idle",
                        # Prometheus's default interval; django-q2 has no /metrics to scrape.
                        scrape_every_s=self.sizes.b3_scrape_every_s if system.name == "dshloop" else None,
                    ),
                )

    def b4(self) -> None:
        have = 0
        for system in self.systems:
            system.reset()
        for size in self.sizes.b4_sizes:
            log(f"B4: {size:,} rows per system")
            for system in self.systems:
                grow(system, have=have, size=size)
                self.record(
                    "B4", f"{system.name}/{size}/query", due_query_ms(system, repeat=self.sizes.b4_query_repeat)
                )
            # What a scrape of GET /metrics costs at this size, no scheduler running.
            self.record("B4", f"dshloop/{size}/scrape", self.scrape(size, "scrape"))
            have = size
            for rep in range(self.sizes.reps):
                for system in self.systems:
                    self.record(
                        "B4",
                        f"{system.name}/{size}/rss",
                        resident(
                            system,
                            burst_rows=self.sizes.b4_burst,
                            offset=rep * self.sizes.b4_burst,
                            log_dir=self.logs("B4", rep),
                            label=f"{size}",
                        ),
                    )
            if size == self.sizes.b4_api_size:
                dshloop = self.systems[0]
                # With a scheduler running, as in production: each loop_create wakes its clock.
                with schedulers(dshloop, 1, self.logs("B4", 0), "api"):
                    for _rep in range(self.sizes.reps):
                        self.record(
                            "B4",
                            f"dshloop/{size}/api",
                            api_latency(
                                creates=self.sizes.b4_creates,
                                lists=self.sizes.b4_lists,
                                global_lists=self.sizes.b4_global_lists,
                            ),
                        )

        # The largest table once more after a VACUUM: grow() only ANALYZEs, so its new pages are not yet
        # all-visible and the index-only counts fetch heap pages for them (see Heap Fetches in the plans).
        largest = self.sizes.b4_sizes[-1]
        self.systems[0].conn.execute("VACUUM (ANALYZE) loops_loop")
        self.record("B4", f"dshloop/{largest}/scrape_vacuumed", self.scrape(largest, "scrape-vacuumed"))

    def scrape(self, size: int, label: str) -> dict:
        return scrape_cost(
            self.systems[0],
            repeat=self.sizes.b4_scrapes,
            explain_path=self.out_dir / f"explain-gauges-{label}-{size}.txt",
        )
