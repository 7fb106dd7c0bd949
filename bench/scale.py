"""B4 scale: the table grown to each size, and at each the scheduler's due queries, its memory
after a small burst, and the agent API's latency."""

from __future__ import annotations

import json
import time
from datetime import timedelta
from pathlib import Path

from .api_token import api_token
from .proc_stats import rss_bytes
from .processes import wait_for
from .queries import time_queries
from .servers import schedulers
from .sizes import SESSIONS
from .stats import percentile
from .systems import System, session_id
from .timing import HOUR, now


def grow(system: System, *, have: int, size: int) -> None:
    """Top the table up to `size` rows, none due for an hour."""
    if size > have:
        system.add_every(size - have, period_s=HOUR, first_at=now() + timedelta(hours=1), spread_s=HOUR, start=have)
    system.analyze()


def due_query_ms(system: System, *, repeat: int) -> dict:
    """The scheduler's due queries against the current table (none due): median ms of each."""
    return {
        name: percentile(time_queries(system.conn, statements, repeat=repeat), 50)
        for name, statements in system.due_queries().items()
    }


def resident(system: System, *, burst_rows: int, offset: int, log_dir: Path, label: str) -> dict:
    """RSS of a scheduler (its whole process tree) after it delivered a small burst."""
    with schedulers(system, 1, log_dir, label) as [process]:
        before = system.delivered_count()
        system.make_due(offset, burst_rows, now())
        system.wake()
        complete = wait_for(
            lambda: system.delivered_count() >= before + burst_rows, timeout=120 + burst_rows / 15, interval=0.25
        )
        time.sleep(1)  # let the workers return to idle
        rss = rss_bytes(process.tree())
        main = rss_bytes([process.pid])
    return {"rss_mb": rss / 2**20, "main_rss_mb": main / 2**20, "burst_complete": complete}


def api_latency(*, creates: int, lists: int, global_lists: int) -> dict:
    """loop_create and loop_list through the API in-process (Django test client): auth, schema,
    service and serialization, as an agent's call sees it minus the network."""
    from django.test import Client

    raw, client = api_token("bench", "tools"), Client()

    def call(tool: str, body: dict, caller: str) -> float:
        started = time.perf_counter()
        response = client.post(
            f"/api/tools/{tool}",
            data=json.dumps(body),
            content_type="application/json",
            headers={"Authorization": f"Bearer {raw}", "X-DSH-Session-Id": caller},
        )
        elapsed = (time.perf_counter() - started) * 1000
        if response.status_code != 200:
            raise RuntimeError(f"{tool} answered {response.status_code}: {response.content[:300]!r}")
        return elapsed

    def create(i: int) -> float:
        body = {"prompt": f"bench create {i}", "schedule": {"kind": "every", "every_seconds": HOUR}}
        return call("loop_create", body, session_id(i % SESSIONS))

    for i in range(5):  # warm-up: imports, URL resolver, first connection
        create(i), call("loop_list", {}, session_id(i))
    create_ms = [create(i) for i in range(creates)]
    list_ms = [call("loop_list", {}, session_id(i % SESSIONS)) for i in range(lists)]
    global_ms = [call("loop_list", {"session_id": "global"}, session_id(0)) for _ in range(global_lists)]
    return {
        "create_p50": percentile(create_ms, 50),
        "create_p99": percentile(create_ms, 99),
        "list_p50": percentile(list_ms, 50),
        "list_p99": percentile(list_ms, 99),
        "global_list_p50": percentile(global_ms, 50),
    }
