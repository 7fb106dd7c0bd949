"""Lists at 100,000 loops: a registry in the mix a long-running one holds, and the time of each
list the API and the panel serve (`python -m bench.run --lists`; docs/BENCHMARKS-LISTS.md)."""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict
from datetime import timedelta

from . import db
from .api_token import api_token
from .harness import log, setup_django
from .machine import machine_facts
from .processes import BASE_DIR
from .sizes import LISTS_FULL, LISTS_QUICK, SESSIONS
from .stats import percentile
from .systems import Dshloop, System, session_id
from .timing import HOUR, now


def run_lists(quick: bool, keep_database: bool) -> int:
    """`--lists`: only the list benchmark, in a database of its own (so it can run beside a full
    run). Prints its numbers; docs/BENCHMARKS-LISTS.md is written from them by hand (it compares
    runs before and after a change)."""
    setup_django(db.LISTS_DB)
    system = Dshloop()
    system.database = db.LISTS_DB

    sizes = LISTS_QUICK if quick else LISTS_FULL
    out_dir = BASE_DIR / "var" / "bench" / time.strftime("%Y%m%d-%H%M%S-lists")
    out_dir.mkdir(parents=True)
    results = {"machine": machine_facts(), "sizes": asdict(sizes)}
    log(f"lists: {sizes.loops:,} loops, {sizes.sessions:,} sessions in {system.database}")
    try:
        system.create_database()
        fill_lists(system, loops=sizes.loops, sessions=sizes.sessions)
        log("lists: filled; timing …")
        results["lists"] = list_latency(
            requests=sizes.requests, full_lists=sizes.full_lists, page_limit=sizes.page_limit
        )
    finally:
        results["machine"]["load_average_end"] = os.getloadavg()
        (out_dir / "results.json").write_text(json.dumps(results, indent=1, default=str))
        if not keep_database:
            from django.db import connection

            connection.close()
            if system.conn is not None:
                system.conn.close()
            db.drop(system.database)
    print(json.dumps(results["lists"], indent=1))
    log(f"lists: raw results in {out_dir}")
    return 0


def fill_lists(system: System, *, loops: int, sessions: int) -> None:
    """`loops` loops in every state and schedule kind a list shows (and 0.5% completed, which lists
    leave out), and `sessions` session headers with titles, spread over time; then ANALYZE."""
    system.reset()  # and the first SESSIONS target sessions
    system.add_every(loops, period_s=HOUR, first_at=now() + timedelta(minutes=5), spread_s=HOUR)
    # By the loop's number i (loop_bench_<i>): a mix a long-running registry would hold.
    system.conn.execute(
        """
        UPDATE loops_loop AS l SET
            kind = CASE WHEN n % 10 = 4 THEN 'cron' WHEN n % 10 = 5 OR n % 200 = 9 THEN 'after' ELSE 'every' END,
            every_seconds = CASE WHEN n % 10 IN (4, 5) OR n % 200 = 9 THEN NULL ELSE every_seconds END,
            after_seconds = CASE WHEN n % 10 = 5 OR n % 200 = 9 THEN 86400 END,
            cron_expr = CASE WHEN n % 10 = 4 THEN '30 9 * * 1-5' ELSE '' END,
            tz = CASE WHEN n % 20 = 4 THEN 'Europe/Berlin' ELSE '' END,
            session_id = CASE WHEN n % 25 = 7 THEN 'new' WHEN n % 25 = 8 THEN 'self' ELSE session_id END,
            preset = CASE WHEN n % 25 = 7 THEN 'coder' ELSE '' END,
            state = CASE WHEN n % 20 = 1 THEN 'paused' WHEN n % 50 = 2 THEN 'failed'
                         WHEN n % 200 = 9 THEN 'completed' WHEN n % 500 = 3 THEN 'running' ELSE 'scheduled' END,
            next_at = CASE WHEN n % 20 = 1 OR n % 50 = 2 OR n % 200 = 9 THEN NULL
                           WHEN n % 100 = 3 THEN date_trunc('milliseconds', now()) - interval '5 minutes'
                           ELSE next_at END,
            paused_at = CASE WHEN n % 20 = 1 THEN created_at END,
            pause_reason = CASE WHEN n % 20 = 1 THEN 'operator' ELSE '' END,
            last_run_at = CASE WHEN n % 10 IN (2, 6) OR n % 200 = 9 THEN created_at END,
            last_result = CASE WHEN n % 10 = 2 THEN 'failed' WHEN n % 10 = 6 OR n % 200 = 9 THEN 'delivered'
                               ELSE '' END,
            last_error = CASE WHEN n % 10 = 2 THEN 'The host knows no session ses_gone.' ELSE '' END
        FROM (SELECT loop_id, substring(loop_id FROM 12)::int AS n FROM loops_loop) AS numbered
        WHERE l.loop_id = numbered.loop_id
        """
    )
    system.conn.execute(
        "INSERT INTO sessions_app_sessionheader (session_id, status, updated_at, preset, model, user_title,"
        " generated_title, first_prompt, global_interface, created_for)"
        " SELECT 'ses_bench_' || i, (ARRAY['running', 'idle', 'cold'])[i %% 3 + 1],"
        " now() - i * interval '37 seconds', 'coder', 'm1',"
        " CASE WHEN i %% 3 = 0 THEN 'Session ' || i ELSE '' END, CASE WHEN i %% 3 = 1 THEN 'Fix bug ' || i ELSE '' END,"
        " 'First prompt of session ' || i, false, NULL FROM generate_series(%s, %s - 1) AS i",
        [SESSIONS, sessions],
    )
    system.conn.execute("VACUUM ANALYZE loops_loop")
    system.conn.execute("VACUUM ANALYZE sessions_app_sessionheader")


def list_latency(*, requests: int, full_lists: int, page_limit: int) -> dict:
    """The lists in-process through the Django test client (auth, schema, query,
    serialization; no network), each request timed alone, no scheduler running:

    - loop_list {"session_id": "global"} without limit: the whole list (`full_lists` times);
    - the same list paged with `limit` = page_limit, first page to last (pages compared to the whole
      list: same loops, same order), and its first page alone (`requests` times);
    - loop_list {} of one session (~N/1,000 loops), list_sessions {} (50) and {"limit": 500};
    - the panel's first page (/panel/, a staff user signed in).
    """
    from django.contrib.auth import get_user_model
    from django.test import Client

    raw, api = api_token("bench-lists", "tools"), Client()
    headers = {"Authorization": f"Bearer {raw}", "X-DSH-Session-Id": session_id(1)}

    def tool(name: str, body: dict) -> tuple[float, dict]:
        started = time.perf_counter()
        response = api.post(
            f"/api/tools/{name}", data=json.dumps(body), content_type="application/json", headers=headers
        )
        content = response.content  # the whole body, as a client would read it
        elapsed = (time.perf_counter() - started) * 1000
        if response.status_code != 200:
            raise RuntimeError(f"{name} answered {response.status_code}: {content[:300]!r}")
        return elapsed, json.loads(content)

    user, _ = get_user_model().objects.get_or_create(username="bench-staff", defaults={"is_staff": True})
    panel = Client()
    panel.force_login(user)

    def panel_page() -> float:
        started = time.perf_counter()
        response = panel.get("/panel/")
        elapsed = (time.perf_counter() - started) * 1000
        if response.status_code != 200:
            raise RuntimeError(f"/panel/ answered {response.status_code}")
        return elapsed

    def timed(run, count: int) -> dict:
        run()  # warm-up: imports, URL resolver, first connection, plan cache
        values = [run() for _ in range(count)]
        return {"p50": percentile(values, 50), "p99": percentile(values, 99), "n": count}

    result: dict = {}
    full_ms, whole = [], None
    for _ in range(full_lists + 1):  # the first one warms up
        elapsed, whole = tool("loop_list", {"session_id": "global"})
        full_ms.append(elapsed)
    result["global_full"] = {"p50": percentile(full_ms[1:], 50), "max": max(full_ms[1:]), "n": full_lists}
    result["global_loops"] = len(whole["loops"])
    result["global_bytes"] = len(json.dumps(whole))

    probe = api.post(
        "/api/tools/loop_list",
        data=json.dumps({"session_id": "global", "limit": page_limit}),
        content_type="application/json",
        headers=headers,
    )
    if probe.status_code == 200:  # a checkout without paging refuses `limit`: only its whole list is timed
        body, page_ms, paged = {"session_id": "global", "limit": page_limit}, [], []
        while True:
            elapsed, page = tool("loop_list", body)
            page_ms.append(elapsed)
            paged += page["loops"]
            if "next_cursor" not in page:
                break
            body = {**body, "cursor": page["next_cursor"]}
        result["global_paged"] = {
            "pages": len(page_ms),
            "total_ms": sum(page_ms),
            "page_p50": percentile(page_ms, 50),
            "page_max": max(page_ms),
            "same_as_whole": [v["loop_id"] for v in paged] == [v["loop_id"] for v in whole["loops"]],
        }
        result["global_first_page"] = timed(
            lambda: tool("loop_list", {"session_id": "global", "limit": page_limit})[0], requests
        )
        result["global_first_page_100"] = timed(
            lambda: tool("loop_list", {"session_id": "global", "limit": 100})[0], requests
        )
    result["session_list"] = timed(lambda: tool("loop_list", {})[0], requests)
    result["list_sessions"] = timed(lambda: tool("list_sessions", {})[0], requests)
    result["list_sessions_500"] = timed(lambda: tool("list_sessions", {"limit": 500})[0], requests)
    result["panel_first_page"] = timed(panel_page, requests)
    return result
