"""The machine a run ran on: CPU, memory, kernel, PostgreSQL and the libraries' versions."""

from __future__ import annotations

import os
import platform
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path

from . import db


def machine_facts() -> dict:
    cpuinfo, meminfo = Path("/proc/cpuinfo").read_text().splitlines(), Path("/proc/meminfo").read_text().splitlines()
    cpu = next(
        (line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")), platform.processor()
    )
    mem_kb = next(int(line.split()[1]) for line in meminfo if line.startswith("MemTotal"))
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "ram_gib": round(mem_kb / 2**20, 1),
        "kernel": platform.release(),
        "postgresql": db.server_version(),
        "python": platform.python_version(),
        "django": version("django"),
        "django-q2": version("django-q2"),
        "croniter": version("croniter"),
        "psycopg": version("psycopg"),
        "load_average_start": os.getloadavg(),
    }
