"""The dashboard's timeline: what breaks when, and a scrape of GET /metrics every SCRAPE_EVERY s,
as Prometheus would, until RUN_SECONDS."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable

from .demo import Demo
from .scrapes import ScrapedRun

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


def run_scenario(demo: Demo) -> ScrapedRun:
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
    run = ScrapedRun(started=time.time())
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
