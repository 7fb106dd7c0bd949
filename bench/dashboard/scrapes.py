"""What one run of the dashboard saw: every scrape of GET /metrics and the moments things broke;
saved as scrapes.jsonl (--keep) and read back (--replay)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families


@dataclass
class Scrape:
    at: float  # epoch seconds at the start of the request, as Prometheus stamps a scrape
    samples: dict[tuple[str, tuple], float]  # (sample name, sorted labels) -> value
    health_status: int


@dataclass
class ScrapedRun:
    started: float
    scrapes: list[Scrape] = field(default_factory=list)
    events: list[tuple[float, str]] = field(default_factory=list)  # (epoch seconds, label)


def parse_metrics(text: str) -> dict[tuple[str, tuple], float]:
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def save_run(run: ScrapedRun, workdir: Path) -> None:
    with open(workdir / "scrapes.jsonl", "w") as file:
        file.write(json.dumps({"started": run.started, "events": run.events}) + "\n")
        for scrape in run.scrapes:
            samples = [[name, dict(labels), value] for (name, labels), value in scrape.samples.items()]
            file.write(json.dumps({"at": scrape.at, "health": scrape.health_status, "samples": samples}) + "\n")


def load_run(workdir: Path) -> ScrapedRun:
    with open(workdir / "scrapes.jsonl") as file:
        header = json.loads(file.readline())
        run = ScrapedRun(started=header["started"], events=[tuple(event) for event in header["events"]])
        for line in file:
            scrape = json.loads(line)
            samples = {(name, tuple(sorted(labels.items()))): value for name, labels, value in scrape["samples"]}
            run.scrapes.append(Scrape(at=scrape["at"], samples=samples, health_status=scrape["health"]))
    return run
