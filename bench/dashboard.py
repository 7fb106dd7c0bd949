"""`python -m bench.dashboard`: renders docs/monitoring-dashboard.png from a real run (issue 18).

The picture in docs/monitoring.md ("Grafana dashboard") is docs/grafana-dashboard.json drawn from a
real dshloop, not from invented numbers. This starts the web server (uvicorn, as in production)
and one `manage.py runloops` on a fresh database, creates a mix of loops through the API, scrapes
GET /metrics every 5 s as Prometheus would, and breaks things on a timeline (the *_AT times below) so that
every panel has something to show. Then it evaluates each panel's query the way Prometheus does
(rate() with its extrapolation, histogram_quantile() by linear interpolation, the alert rules of
docs/prometheus/dshloop.rules.yml with their `for:`) and draws the panels in Grafana's dark style,
with the JSON's titles and layout. About 5 minutes; needs the `docs` extra (matplotlib).

Web and scheduler run as separate processes, as docs/production.md advises under a
process manager: `manage.py serve` would restart a crashed scheduler within a second and hide the
outage the dashboard is meant to show.

Only the PNG is kept. The scrapes are a few hundred kilobytes that differ on every run; with
--keep the temporary directory (scrapes.jsonl, the processes' logs) stays for a closer look, and
--replay DIR draws it again without a new run (to work on the picture).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

BASE_DIR = Path(__file__).resolve().parent.parent
DASHBOARD_JSON = BASE_DIR / "docs" / "grafana-dashboard.json"
RULES_YML = BASE_DIR / "docs" / "prometheus" / "dshloop.rules.yml"
OUTPUT_PNG = BASE_DIR / "docs" / "monitoring-dashboard.png"

SCRAPE_EVERY = 5.0  # seconds, a common Prometheus scrape_interval for a small service
# Grafana's $__rate_interval for a 5-minute range: max($__interval + scrape, 4 × scrape) = 20 s.
RATE_INTERVAL = 4 * SCRAPE_EVERY
RUN_SECONDS = 280.0

# What is broken when, in seconds from the first scrape; each step is drawn as an annotation.
PAUSE_AT = 30.0  # an operator pauses one loop (POST /api/loops/{id}/pause)
BREAK_PRESET_AT = 40.0  # the preset of six `new` loops becomes unmountable: their deliveries fail
HANG_AT, UNHANG_AT = 60.0, 110.0  # the scheduler's workers freeze (SIGSTOP): runs stay open
CRASH_AT, RESTART_AT = 140.0, 215.0  # kill -9 of the scheduler, then a new one: catch-up
FIX_PRESET_AT = 225.0  # the preset is mountable again

# The demo's failure policy: a failing loop retries every 3 s and is never paused, so failures
# form a steady stream the failure-ratio panel can show (the defaults back off to an hour).
DEMO_ENV = {"DSHLOOP_FAILURE_BACKOFF_SECONDS": "3", "DSHLOOP_AUTO_PAUSE_AFTER": "0"}


class Process:
    """A child in its own process group (a kill -9 of the group leaves nothing behind), its
    output in a log file. This script never sets up Django itself, so it cannot use bench.procs."""

    def __init__(self, args: list[str], *, env: dict[str, str], log_path: Path):
        self.log_path = log_path
        self.log = open(log_path, "wb")
        self.popen = subprocess.Popen(
            args, env=env, cwd=BASE_DIR, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True
        )
        self.pid = self.popen.pid

    def running(self) -> bool:
        return self.popen.poll() is None

    def output(self) -> str:
        self.log.flush()
        return self.log_path.read_text(errors="replace")

    def stop(self, timeout: float = 30) -> None:
        """SIGTERM and wait; SIGCONT first, in case its children are stopped; the group is
        killed if it does not exit in time."""
        if self.running():
            for pid in [self.pid, *descendants(self.pid)]:
                try:
                    os.kill(pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.pid, signal.SIGKILL)
                self.popen.wait(10)
        self.log.close()


def descendants(pid: int) -> list[int]:
    """All live descendants of a process (/proc), as runloops finds its cluster."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    parent = int(stat.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(parent, []).append(int(entry))
    found, pending = [], list(children.get(pid, []))
    while pending:
        child = pending.pop()
        found.append(child)
        pending.extend(children.get(child, []))
    return found


def wait_for(condition: Callable[[], bool], *, timeout: float, interval: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(interval)
    return True


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


# ---------------------------------------------------------------------------------------------
# The run


@dataclass
class Scrape:
    at: float  # epoch seconds at the start of the request, as Prometheus stamps a scrape
    samples: dict[tuple[str, tuple], float]  # (sample name, sorted labels) -> value
    health_status: int


@dataclass
class Run:
    started: float
    scrapes: list[Scrape] = field(default_factory=list)
    events: list[tuple[float, str]] = field(default_factory=list)  # (epoch seconds, label)


def parse_metrics(text: str) -> dict[tuple[str, tuple], float]:
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


class Database:
    """SQLite in the run's directory by default; with a PostgreSQL URL, that database is created
    for the run (it must not exist) and dropped at the end."""

    def __init__(self, url: str | None, workdir: Path):
        self.url = url or f"sqlite:///{workdir / 'dashboard.sqlite3'}"
        self.postgres = self.url.startswith(("postgres://", "postgresql://"))
        self.name = self.url.rsplit("/", 1)[1] if self.postgres else ""

    def _admin(self):
        import psycopg  # only on this path: a SQLite run needs no PostgreSQL driver

        return psycopg.connect(self.url.rsplit("/", 1)[0] + "/postgres", autocommit=True)

    def create(self) -> None:
        if self.postgres:
            with self._admin() as admin:
                admin.execute(f'CREATE DATABASE "{self.name}"')

    def drop(self) -> None:
        if self.postgres:
            with self._admin() as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')


class Demo:
    """The processes, the API client and the scripted loops of one run."""

    def __init__(self, workdir: Path, database_url: str):
        self.workdir = workdir
        self.port = free_port()
        self.env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "dshloop.settings",
            "DATABASE_URL": database_url,
            "DJANGO_SECRET_KEY": secrets.token_urlsafe(50),
            "DSHLOOP_VAR_DIR": str(workdir),
            "PYTHONUNBUFFERED": "1",
            **DEMO_ENV,
        }
        self.web: Process | None = None
        self.schedulers: list[Process] = []
        self.client: httpx.Client | None = None
        self.loop_ids: list[str] = []
        self.started = time.time()

    def manage(self, *args: str) -> str:
        result = subprocess.run(
            [sys.executable, str(BASE_DIR / "manage.py"), *args],
            env=self.env,
            cwd=BASE_DIR,
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode:
            raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")
        return result.stdout

    def start(self) -> None:
        self.manage("migrate", "--noinput")
        token = self.manage("create_api_token", "--name", "dashboard", *self._scopes()).strip().splitlines()[-1]
        self.web = Process(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "dshloop.asgi:application",
                "--host=127.0.0.1",
                f"--port={self.port}",
                "--lifespan=on",
                "--log-level=warning",
            ],
            env=self.env,
            log_path=self.workdir / "web.log",
        )
        self.client = httpx.Client(
            base_url=f"http://127.0.0.1:{self.port}",
            headers={"Authorization": f"Bearer {token}", "X-DSH-Session-Id": "ses_me"},
            timeout=10,
        )
        if not wait_for(self._answers, timeout=60):
            raise RuntimeError(f"the web server did not answer within 60 s: {self.web.output()[-2000:]}")
        self.start_scheduler()

    @staticmethod
    def _scopes() -> list[str]:
        return [arg for scope in ("tools", "host", "manage") for arg in ("--scope", scope)]

    def _answers(self) -> bool:
        try:
            return self.client.get("/api/health").status_code in (200, 503)
        except httpx.TransportError:
            return False

    def start_scheduler(self) -> None:
        process = Process(
            [sys.executable, str(BASE_DIR / "manage.py"), "runloops"],
            env=self.env,
            log_path=self.workdir / f"runloops-{len(self.schedulers)}.log",
        )
        self.schedulers.append(process)
        if not wait_for(lambda: self._scheduler_alive() or not process.running(), timeout=60):
            raise RuntimeError(f"runloops did not tick within 60 s: {process.output()[-2000:]}")
        if not process.running():
            raise RuntimeError(f"runloops exited: {process.output()[-2000:]}")

    def _scheduler_alive(self) -> bool:
        return self.client.get("/api/health").json()["scheduler"]["instances"] > 0

    def call(self, method: str, path: str, body: dict | None = None) -> dict:
        response = self.client.request(method, path, json=body)
        if response.status_code >= 400:
            raise RuntimeError(f"{method} {path} -> {response.status_code}: {response.text}")
        return response.json()

    def create_loops(self) -> None:
        """Sessions and presets on the embedded host, then 20 loops: 10 recurring ones every 2-5 s
        to three targets, 6 to fresh sessions of the preset that will break, a cron loop and three
        one-shots that complete during the run."""
        self.call("PUT", "/api/host/sessions/ses_ui", {"global_interface": True, "user_title": "Global interface"})
        self.call("PUT", "/api/host/sessions/ses_me", {"status": "idle", "preset": "coder", "model": "m1"})
        self.call("PUT", "/api/host/sessions/ses_ops", {"status": "cold", "preset": "coder", "model": "m1"})
        self.call("PUT", "/api/host/presets/coder", {})
        self.call("PUT", "/api/host/presets/flaky", {})
        loops = [
            {"schedule": {"kind": "every", "every_seconds": 2 + i % 4}, "session_id": target}
            for i, target in enumerate(["self", "ses_me", "ses_ops"] * 3 + ["self"])
        ]
        loops += [{"schedule": {"kind": "every", "every_seconds": 3}, "session_id": "new", "preset": "flaky"}] * 6
        loops.append({"schedule": {"kind": "cron", "expr": "* * * * *"}, "session_id": "self"})
        loops += [{"schedule": {"kind": "after", "after_seconds": s}} for s in (45, 100, 250)]
        for index, loop in enumerate(loops):
            created = self.call("POST", "/api/tools/loop_create", {"prompt": f"Dashboard demo loop {index}", **loop})
            self.loop_ids.append(created["loop_id"])

    def pause_one(self) -> None:
        self.call("POST", f"/api/loops/{self.loop_ids[0]}/pause")

    def set_preset(self, *, mountable: bool) -> None:
        self.call("PUT", "/api/host/presets/flaky", {"mountable": mountable})

    def signal_workers(self, signum: int) -> None:
        """SIGSTOP/SIGCONT the scheduler's django-q2 processes, not runloops itself: its clock
        goes on claiming (and ticking), nothing delivers: a host call that never returns."""
        for pid in descendants(self.schedulers[-1].pid):
            try:
                os.kill(pid, signum)
            except ProcessLookupError:
                pass

    def crash_scheduler(self) -> None:
        """kill -9 of the scheduler and its cluster (its own process group): no clean-up runs, its
        heartbeat row stays behind and ages, its open runs wait for their lease to expire."""
        process = self.schedulers[-1]
        os.killpg(process.pid, signal.SIGKILL)
        process.popen.wait(10)
        process.stop()

    def scrape(self) -> Scrape:
        """A failed scrape has no samples (Prometheus's up == 0): its panels show a gap."""
        at = time.time()
        try:
            metrics = self.client.get("/metrics")
            metrics.raise_for_status()
            samples = parse_metrics(metrics.text)
        except httpx.HTTPError as exc:
            print(f"  scrape at t+{at - self.started:.0f}s failed: {exc}", flush=True)
            samples = {}
        try:
            health = self.client.get("/api/health").status_code
        except httpx.HTTPError:
            health = 0
        return Scrape(at=at, samples=samples, health_status=health)

    def close(self) -> None:
        for process in self.schedulers:
            process.stop()
        if self.web:
            self.web.stop()
        if self.client:
            self.client.close()


def run_scenario(demo: Demo) -> Run:
    steps: list[tuple[float, str, Callable[[], None]]] = [
        (3.0, "", demo.create_loops),
        (PAUSE_AT, "loop paused", demo.pause_one),
        (BREAK_PRESET_AT, "preset broken", lambda: demo.set_preset(mountable=False)),
        (HANG_AT, "workers hang", lambda: demo.signal_workers(signal.SIGSTOP)),
        (UNHANG_AT, "workers resume", lambda: demo.signal_workers(signal.SIGCONT)),
        (CRASH_AT, "scheduler kill -9", demo.crash_scheduler),
        (RESTART_AT, "scheduler restarted", demo.start_scheduler),
        (FIX_PRESET_AT, "preset fixed", lambda: demo.set_preset(mountable=True)),
    ]
    run = Run(started=time.time())
    demo.started = run.started
    next_scrape = 0.0
    while True:
        elapsed = time.time() - run.started
        if steps and steps[0][0] <= elapsed:
            _, label, action = steps.pop(0)
            action()
            if label:
                run.events.append((time.time(), label))
                print(f"  t+{elapsed:5.1f}s  {label}", flush=True)
            continue
        if next_scrape <= elapsed:
            if next_scrape > RUN_SECONDS:
                return run
            run.scrapes.append(demo.scrape())
            next_scrape += SCRAPE_EVERY
            continue
        time.sleep(min(next_scrape, steps[0][0] if steps else next_scrape) - elapsed)


# ---------------------------------------------------------------------------------------------
# PromQL, as far as the dashboard needs it


@dataclass(frozen=True)
class Sample:
    at: float
    value: float


def series(scrapes: list[Scrape], name: str, **labels: str) -> list[Sample]:
    """One series (the sample name and exactly these labels) over the scrapes that have it."""
    key = (name, tuple(sorted(labels.items())))
    return [Sample(s.at, s.samples[key]) for s in scrapes if key in s.samples]


def label_values(scrapes: list[Scrape], name: str, label: str) -> list[str]:
    return sorted({dict(labels)[label] for s in scrapes for sample, labels in s.samples if sample == name})


def window(points: list[Sample], at: float, seconds: float) -> list[Sample]:
    return [p for p in points if at - seconds < p.at <= at]


def rate(points: list[Sample], at: float, seconds: float) -> float:
    """Prometheus's rate(): the counter's increase over the window (resets count from zero),
    extrapolated to the window's edges unless they are more than 1.1 sample intervals away, and
    never below zero at the start; NaN with fewer than two samples."""
    samples = window(points, at, seconds)
    if len(samples) < 2:
        return math.nan
    increase = samples[-1].value - samples[0].value
    for before, after in zip(samples, samples[1:], strict=False):
        if after.value < before.value:
            increase += before.value
    sampled = samples[-1].at - samples[0].at
    average = sampled / (len(samples) - 1)
    to_start = samples[0].at - (at - seconds)
    to_end = at - samples[-1].at
    if to_start >= average * 1.1:
        to_start = average / 2
    if to_end >= average * 1.1:
        to_end = average / 2
    if increase > 0 and samples[0].value >= 0:
        to_start = min(to_start, sampled * samples[0].value / increase)
    return increase * (sampled + to_start + to_end) / sampled / seconds


def histogram_quantile(q: float, buckets: list[tuple[float, float]]) -> float:
    """Prometheus's histogram_quantile() over (upper bound, cumulative rate) pairs: linear
    interpolation inside the bucket that holds the rank; the highest finite bound when the rank
    falls in +Inf; NaN when nothing was observed."""
    buckets = sorted(buckets)
    if len(buckets) < 2 or not buckets[-1][0] == math.inf or math.isnan(buckets[-1][1]) or buckets[-1][1] <= 0:
        return math.nan
    rank = q * buckets[-1][1]
    index = next(i for i, (_, cumulative) in enumerate(buckets) if cumulative >= rank)
    bound, cumulative = buckets[index]
    if bound == math.inf:
        return buckets[-2][0]
    start, below = (0.0, 0.0) if index == 0 else buckets[index - 1]
    if cumulative == below:
        return bound
    return start + (bound - start) * (rank - below) / (cumulative - below)


def gauge(points: list[Sample], at: float) -> float:
    """An instant vector at a scrape's time: the sample of that scrape (5 s steps), if any."""
    for p in points:
        if p.at == at:
            return p.value
    return math.nan


# ---------------------------------------------------------------------------------------------
# The panels


@dataclass
class Line:
    label: str
    values: list[float]


@dataclass
class PanelData:
    lines: list[Line]
    stacked: bool = False
    log: bool = False
    unit: str = ""
    threshold: float | None = None  # a red line, shaded above (or below, with below=True)
    below: bool = False
    states: dict[str, list[int]] | None = None  # the Alerts panel: 0 normal, 1 pending, 2 firing


def evaluate(run: Run, rules: dict) -> dict[str, PanelData]:
    """Each panel of docs/grafana-dashboard.json by its title, evaluated at every scrape."""
    scrapes = run.scrapes
    times = [s.at for s in scrapes]

    def at_each(f: Callable[[float], float]) -> list[float]:
        return [f(t) for t in times]

    occurrences = {
        result: series(scrapes, "dshloop_occurrences_total", result=result)
        for result in ("delivered", "failed", "skipped")
    }

    def failure_ratio(t: float, seconds: float) -> float:
        failed = rate(occurrences["failed"], t, seconds)
        finished = failed + rate(occurrences["delivered"], t, seconds)
        return failed / finished if finished > 0 else math.nan

    bounds = label_values(scrapes, "dshloop_delivery_lateness_seconds_bucket", "le")
    buckets = {float(le): series(scrapes, "dshloop_delivery_lateness_seconds_bucket", le=le) for le in bounds}

    def lateness(q: float, t: float) -> float:
        return histogram_quantile(q, [(le, rate(points, t, RATE_INTERVAL)) for le, points in buckets.items()])

    def one(name: str) -> list[float]:
        points = series(scrapes, name)
        return at_each(lambda t: gauge(points, t))

    states = ("scheduled", "running", "paused", "failed", "completed")
    by_state = {state: series(scrapes, "dshloop_loops", state=state) for state in states}
    last_tick = series(scrapes, "dshloop_scheduler_last_tick_timestamp_seconds")
    instances = series(scrapes, "dshloop_scheduler_instances")
    backlog = series(scrapes, "dshloop_due_backlog")
    return {
        "Occurrences per second, by result": PanelData(
            [Line(r, at_each(lambda t, p=p: rate(p, t, RATE_INTERVAL))) for r, p in occurrences.items()],
            unit="/s",
        ),
        "Failure ratio (5m)": PanelData(
            [Line("failed share", at_each(lambda t: failure_ratio(t, 300)))], unit="%", threshold=0.10
        ),
        "Delivery lateness p50 / p95 / p99": PanelData(
            [Line(f"p{round(q * 100)}", at_each(lambda t, q=q: lateness(q, t))) for q in (0.5, 0.95, 0.99)],
            log=True,
            unit="s",
        ),
        "Missed occurrences per second": PanelData(
            [
                Line(
                    "missed",
                    at_each(lambda t: rate(series(scrapes, "dshloop_missed_occurrences_total"), t, RATE_INTERVAL)),
                )
            ],
            unit="/s",
        ),
        "Due backlog": PanelData([Line("due, unclaimed", one("dshloop_due_backlog"))]),
        "Open runs": PanelData([Line("open", one("dshloop_open_runs"))]),
        "Oldest open run age": PanelData(
            [Line("oldest open run", one("dshloop_oldest_open_run_age_seconds"))], unit="s"
        ),
        "Loops by state": PanelData(
            [Line(state, at_each(lambda t, p=by_state[state]: gauge(p, t))) for state in states],
            stacked=True,
        ),
        "Scheduler instances": PanelData([Line("alive", one("dshloop_scheduler_instances"))], threshold=1, below=True),
        "Seconds since last scheduler tick": PanelData(
            [Line("since last tick", at_each(lambda t: t - gauge(last_tick, t)))], unit="s", threshold=60
        ),
        "Alerts": PanelData([], states=alert_states(rules, times, instances, backlog, failure_ratio, occurrences)),
    }


def alert_states(rules, times, instances, backlog, failure_ratio, occurrences) -> dict[str, list[int]]:
    """The three rules of docs/prometheus/dshloop.rules.yml at every scrape, with their `for:`
    (read from the file): 0 inactive, 1 pending, 2 firing. Windows longer than the run see the
    samples there are, as Prometheus's range selectors do."""

    def no_scheduler(t: float) -> bool:
        value = gauge(instances, t)
        return math.isnan(value) or value < 1

    def backlog_stays(t: float) -> bool:
        values = [p.value for p in window(backlog, t, 600)]
        return bool(values) and min(values) > 0

    def failing(t: float) -> bool:
        ratio = failure_ratio(t, 900)
        return not math.isnan(ratio) and ratio > 0.10 and rate(occurrences["failed"], t, 900) > 1 / 120

    conditions = {
        "DshloopNoScheduler": no_scheduler,
        "DshloopBacklogGrowing": backlog_stays,
        "DshloopHighFailureRate": failing,
    }
    states = {}
    for name, condition in conditions.items():
        hold = _seconds(rules[name].get("for", "0s"))
        active_since, row = None, []
        for t in times:
            if not condition(t):
                active_since = None
                row.append(0)
                continue
            active_since = t if active_since is None else active_since
            row.append(2 if t - active_since >= hold else 1)
        states[name] = row
    return states


def _seconds(duration: str) -> float:
    units = {"s": 1, "m": 60, "h": 3600}
    return float(duration[:-1]) * units[duration[-1]]


def load_rules() -> dict[str, dict]:
    """Each alert's `for:` from the rules file. A line scan, not a YAML parser: PyYAML is no
    dependency of ours, and the file's layout (`- alert:` then `for:`) is ours too."""
    rules: dict[str, dict] = {}
    current = None
    for line in RULES_YML.read_text().splitlines():
        key, _, value = line.strip().removeprefix("- ").partition(":")
        if key == "alert":
            current = rules.setdefault(value.strip(), {})
        elif key == "for" and current is not None:
            current["for"] = value.strip()
    return rules


# ---------------------------------------------------------------------------------------------
# Drawing, in Grafana's dark theme

BACKGROUND = "#111217"
PANEL = "#181b1f"
BORDER = "#2c3235"
GRID = "#2a2d33"
TEXT = "#ccccdc"
MUTED = "#8e8e9e"
ANNOTATION = "#5794f2"
COLORS = {
    "green": "#73bf69",
    "yellow": "#fade2a",
    "red": "#f2495c",
    "orange": "#ff9830",
    "blue": "#5794f2",
    "purple": "#b877d9",
    "text": "#ccccdc",
}


def series_colors(panel_json: dict) -> dict[str, str]:
    """The fixed colours of the JSON's overrides, by series name."""
    colors = {}
    for override in panel_json.get("fieldConfig", {}).get("overrides", []):
        for prop in override["properties"]:
            if prop["id"] == "color":
                colors[override["matcher"]["options"]] = COLORS.get(prop["value"]["fixedColor"], TEXT)
    return colors


def format_value(value: float, unit: str) -> str:
    if unit == "%":
        return f"{value * 100:.0f}%"
    if unit == "s":
        if value >= 60:
            return f"{value / 60:.0f} min" if value >= 600 else f"{value:.0f} s"
        return f"{value:g} s" if value < 1 else f"{value:.0f} s"
    if unit == "/s":
        return f"{value:g}/s" if value < 10 else f"{value:.0f}/s"
    return f"{value:g}"


def render(run: Run, data: dict[str, PanelData], dashboard: dict, output: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyBboxPatch
    from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator

    plt.rcParams.update({"font.family": "DejaVu Sans", "font.size": 9, "text.color": TEXT})
    columns, header_rows = 24, 1.3
    rows = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in dashboard["panels"])
    width, row_height = 18.0, 0.34
    figure = plt.figure(figsize=(width, (rows + header_rows) * row_height + 0.2), facecolor=BACKGROUND)
    total_height = rows + header_rows

    start = datetime.fromtimestamp(run.scrapes[0].at, UTC)
    end = datetime.fromtimestamp(run.scrapes[-1].at, UTC)
    figure.text(0.008, 1 - 0.45 / total_height, dashboard["title"], fontsize=15, weight="bold", va="center")
    figure.text(
        0.072,
        1 - 0.45 / total_height,
        f"{start:%Y-%m-%d %H:%M:%S} to {end:%H:%M:%S} UTC  ·  scrape every {SCRAPE_EVERY:g} s  ·  "
        f"$__rate_interval = {RATE_INTERVAL:g} s  ·  one real run of bench/dashboard.py (uvicorn + runloops, "
        f"{len(run.scrapes)} scrapes of GET /metrics)",
        fontsize=9,
        color=MUTED,
        va="center",
    )
    marks = "   ".join(f"{i + 1} {label}" for i, (_, label) in enumerate(run.events))
    figure.text(0.008, 1 - 1.0 / total_height, f"Annotations:  {marks}", fontsize=9, color=ANNOTATION, va="center")

    times = [datetime.fromtimestamp(s.at, UTC) for s in run.scrapes]
    events = [(datetime.fromtimestamp(at, UTC), i + 1) for i, (at, _) in enumerate(run.events)]
    gap = 0.12  # grid units between panels
    for panel in dashboard["panels"]:
        pos = panel["gridPos"]
        left, right = (pos["x"] + gap) / columns, (pos["x"] + pos["w"] - gap) / columns
        top = 1 - (header_rows + pos["y"] + gap) / total_height
        bottom = 1 - (header_rows + pos["y"] + pos["h"] - gap) / total_height
        figure.patches.append(
            FancyBboxPatch(
                (left, bottom),
                right - left,
                top - bottom,
                boxstyle="round,pad=0,rounding_size=0.004",
                transform=figure.transFigure,
                facecolor=PANEL,
                edgecolor=BORDER,
                linewidth=0.8,
                zorder=0,
            )
        )
        figure.text(left + 0.006, top - 0.3 / total_height, panel["title"], fontsize=10, weight="bold", va="top")
        panel_data = data[panel["title"]]
        ax = figure.add_axes(
            (
                left + (0.05 if panel_data.states else 0.032),
                bottom + 1.35 / total_height,
                right - left - (0.058 if panel_data.states else 0.042),
                top - bottom - 2.3 / total_height,
            )
        )
        ax.set_zorder(2)  # above the panel's background
        ax.set_facecolor(PANEL)
        for spine in ax.spines.values():
            spine.set_visible(False)
        ax.tick_params(colors=MUTED, labelsize=8, length=0)
        ax.grid(True, color=GRID, linewidth=0.7)
        ax.set_axisbelow(True)
        ax.xaxis.set_major_locator(mdates.SecondLocator(bysecond=[0, 30]))
        ax.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M:%S", tz=UTC))
        ax.set_xlim(times[0], times[-1])
        colors = series_colors(panel)
        if panel_data.states:
            draw_states(ax, times, panel_data.states)
        else:
            style = panel["fieldConfig"]["defaults"]["custom"].get("thresholdsStyle", {}).get("mode", "off")
            draw_lines(ax, times, panel_data, colors, area=style.endswith("area"))
            unit = panel_data.unit
            if panel_data.log:
                ax.set_yscale("log")
                ax.yaxis.set_major_locator(LogLocator(base=10))
            else:
                ax.yaxis.set_major_locator(MaxNLocator(nbins=5, integer=unit in ("",)))
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _, unit=unit: format_value(v, unit)))
            handles = dict(zip(*reversed(ax.get_legend_handles_labels()), strict=True))
            order = [line.label for line in panel_data.lines]
            legend = ax.legend(
                [handles[label] for label in order],
                order,
                loc="upper left",
                bbox_to_anchor=(0, -0.13),
                ncol=len(panel_data.lines),
                frameon=False,
                fontsize=8.5,
                handlelength=1.2,
                columnspacing=1.4,
                labelcolor=TEXT,
            )
            legend.set_in_layout(False)
        for when, number in events:
            ax.axvline(when, color=ANNOTATION, linewidth=0.9, linestyle=(0, (3, 3)), alpha=0.75, zorder=1)
            ax.annotate(
                str(number),
                (when, 1),
                xycoords=("data", "axes fraction"),
                xytext=(2, -2),
                textcoords="offset points",
                fontsize=7,
                color=ANNOTATION,
                va="top",
            )
    output.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(output, dpi=110, facecolor=BACKGROUND)
    plt.close(figure)


def draw_lines(ax, times, panel_data: PanelData, colors: dict[str, str], *, area: bool) -> None:
    import numpy as np

    fallback = iter(COLORS.values())
    if panel_data.stacked:
        values = np.nan_to_num(np.array([line.values for line in panel_data.lines], dtype=float))
        palette = [colors.get(line.label) or next(fallback) for line in panel_data.lines]
        ax.stackplot(times, values, colors=[c + "40" for c in palette], linewidth=0)
        tops = np.cumsum(values, axis=0)
        # Top layer first: where a layer is empty, the line of the one beneath it stays visible.
        for line, color, top in reversed(list(zip(panel_data.lines, palette, tops, strict=True))):
            ax.plot(times, top, color=color, linewidth=1.6, label=line.label)
        ax.set_ylim(0, max(tops[-1].max() * 1.15, 1.0))
        return
    for line in panel_data.lines:
        color = colors.get(line.label) or next(fallback)
        values = np.array(line.values, dtype=float)
        ax.plot(times, values, color=color, linewidth=1.6, label=line.label)
        if not panel_data.log:
            ax.fill_between(times, values, color=color, alpha=0.08, linewidth=0)
    if panel_data.log:
        return
    peak = max((v for line in panel_data.lines for v in line.values if not math.isnan(v)), default=0.0)
    top = max(peak * 1.15, 1.0 if panel_data.unit != "%" else 0.25)
    threshold = panel_data.threshold
    if threshold is not None:
        top = max(top, threshold * 1.25)
        red = COLORS["red"]
        ax.axhline(threshold, color=red, linewidth=1, linestyle=(0, (4, 3)), alpha=0.9)
        if area:
            ax.axhspan(*((0, threshold) if panel_data.below else (threshold, top)), color=red, alpha=0.05, linewidth=0)
    ax.set_ylim(0, top)


def draw_states(ax, times, states: dict[str, list[int]]) -> None:
    """Grafana's state timeline: one row per alert, yellow while pending, red while firing; a
    state lasts from its scrape to the next."""
    import matplotlib.dates as mdates
    from matplotlib.patches import Patch

    edges = [mdates.date2num(t) for t in times]
    edges.append(edges[-1] + (edges[-1] - edges[-2] if len(edges) > 1 else 0))
    names = list(states)
    for row, name in enumerate(names):
        y = len(names) - 1 - row
        ax.broken_barh([(edges[0], edges[-2] - edges[0])], (y - 0.38, 0.76), color="#22252b")
        index = 0
        while index < len(times):
            state, end = states[name][index], index
            while end + 1 < len(times) and states[name][end + 1] == state:
                end += 1
            if state:
                color = COLORS["red"] if state == 2 else COLORS["yellow"]
                span = min(edges[end + 1], edges[-2]) - edges[index]
                ax.broken_barh([(edges[index], span)], (y - 0.38, 0.76), color=color, alpha=0.85)
            index = end + 1
    ax.set_yticks(range(len(names)), list(reversed(names)))
    ax.set_ylim(-0.6, len(names) - 0.4)
    ax.grid(False)
    legend = ax.legend(
        [Patch(color=COLORS["yellow"]), Patch(color=COLORS["red"])],
        ["pending", "firing"],
        loc="upper left",
        bbox_to_anchor=(0, -0.13),
        ncol=2,
        frameon=False,
        fontsize=8.5,
        handlelength=1.2,
        labelcolor=TEXT,
    )
    legend.set_in_layout(False)


# ---------------------------------------------------------------------------------------------


def summary(run: Run, data: dict[str, PanelData]) -> str:
    last = run.scrapes[-1].samples

    def total(name: str, **labels: str) -> float:
        return last.get((name, tuple(sorted(labels.items()))), math.nan)

    def peak(title: str, label: str | None = None) -> float:
        lines = data[title].lines
        values = [v for line in lines if label in (None, line.label) for v in line.values if not math.isnan(v)]
        return max(values, default=math.nan)

    statuses = [s.health_status for s in run.scrapes]
    return "\n".join(
        [
            f"scrapes: {len(run.scrapes)} over {run.scrapes[-1].at - run.scrapes[0].at:.0f} s",
            "occurrences: delivered {:.0f}, failed {:.0f}, skipped {:.0f}; missed {:.0f}".format(
                total("dshloop_occurrences_total", result="delivered"),
                total("dshloop_occurrences_total", result="failed"),
                total("dshloop_occurrences_total", result="skipped"),
                total("dshloop_missed_occurrences_total"),
            ),
            f"peak delivered/s {peak('Occurrences per second, by result', 'delivered'):.2f}, "
            f"failed/s {peak('Occurrences per second, by result', 'failed'):.2f}, "
            f"failure ratio (5m) {peak('Failure ratio (5m)') * 100:.0f}%",
            f"peak lateness p50 {peak('Delivery lateness p50 / p95 / p99', 'p50'):.2f} s, "
            f"p99 {peak('Delivery lateness p50 / p95 / p99', 'p99'):.1f} s; "
            f"peak missed/s {peak('Missed occurrences per second'):.2f}",
            f"peak due backlog {peak('Due backlog'):.0f}, open runs {peak('Open runs'):.0f}, "
            f"oldest open run {peak('Oldest open run age'):.0f} s, "
            f"since last tick {peak('Seconds since last scheduler tick'):.0f} s",
            f"/api/health: {statuses.count(200)} × 200, {statuses.count(503)} × 503",
            "alerts: "
            + ", ".join(
                f"{name} {'firing' if 2 in row else 'pending' if 1 in row else 'inactive'}"
                for name, row in data["Alerts"].states.items()
            ),
        ]
    )


def save_run(run: Run, workdir: Path) -> None:
    with open(workdir / "scrapes.jsonl", "w") as file:
        file.write(json.dumps({"started": run.started, "events": run.events}) + "\n")
        for scrape in run.scrapes:
            samples = [[name, dict(labels), value] for (name, labels), value in scrape.samples.items()]
            file.write(json.dumps({"at": scrape.at, "health": scrape.health_status, "samples": samples}) + "\n")


def load_run(workdir: Path) -> Run:
    with open(workdir / "scrapes.jsonl") as file:
        header = json.loads(file.readline())
        run = Run(started=header["started"], events=[tuple(event) for event in header["events"]])
        for line in file:
            scrape = json.loads(line)
            samples = {(name, tuple(sorted(labels.items()))): value for name, labels, value in scrape["samples"]}
            run.scrapes.append(Scrape(at=scrape["at"], samples=samples, health_status=scrape["health"]))
    return run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--database-url",
        help="a PostgreSQL URL whose database this run creates and drops (default: SQLite in a temporary directory)",
    )
    parser.add_argument("--output", type=Path, default=OUTPUT_PNG)
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory (scrapes, logs)")
    parser.add_argument("--replay", type=Path, help="draw again from the directory a --keep run left, without a run")
    args = parser.parse_args(argv)

    with open(DASHBOARD_JSON) as file:
        dashboard = json.load(file)
    rules = load_rules()
    if args.replay:
        workdir = args.replay
        run = load_run(workdir)
    else:
        workdir = Path(tempfile.mkdtemp(prefix="dshloop-dashboard-"))
        database = Database(args.database_url, workdir)
        database.create()
        demo = Demo(workdir, database.url)
        try:
            print(f"starting dshloop in {workdir} ({'PostgreSQL' if database.postgres else 'SQLite'})", flush=True)
            demo.start()
            print(f"scraping /metrics every {SCRAPE_EVERY:g} s for {RUN_SECONDS:g} s", flush=True)
            run = run_scenario(demo)
        finally:
            demo.close()
            database.drop()
        save_run(run, workdir)
    data = evaluate(run, rules)
    missing = {p["title"] for p in dashboard["panels"]} - set(data)
    if missing:
        raise SystemExit(f"panels of {DASHBOARD_JSON.name} this script cannot draw: {sorted(missing)}")
    render(run, data, dashboard, args.output)
    print(summary(run, data))
    print(f"wrote {args.output}")
    if args.keep or args.replay:
        print(f"kept {workdir}")
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
