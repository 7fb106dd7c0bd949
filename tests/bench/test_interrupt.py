"""An interrupted benchmark stops the children it started (bench.processes.stop_children_on_exit):
they run in sessions of their own, where a terminal's Ctrl-C never reaches them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from tests.processes import wait_for

HARNESS = """
import os, sys, time
from pathlib import Path
from bench.processes import Process, stop_children_on_exit

stop_children_on_exit()
child = Process([sys.executable, "-c", "import time; time.sleep(120)"], env=dict(os.environ), log_path=Path(sys.argv[1]))
print(child.pid, flush=True)
time.sleep(120)
"""


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # a zombie has ended
        return stat.read().rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.parametrize("interrupt", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_harness_leaves_no_child_running(tmp_path, interrupt):
    from django.conf import settings

    harness = subprocess.Popen(
        [sys.executable, "-c", HARNESS, str(tmp_path / "child.log")],
        cwd=settings.BASE_DIR,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        child = int(harness.stdout.readline())
        assert alive(child)
        harness.send_signal(interrupt)
        harness.wait(30)
        wait_for(lambda: not alive(child), timeout=15, message="the child to stop")
    finally:
        harness.kill()
