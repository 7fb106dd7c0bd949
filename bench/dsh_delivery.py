"""B5: delivery into a real DSH, beside DSH's own prompts in the same run (`python -m bench.run
--dsh [--quick]`, `make bench DSH=1`).

A real DSH 0.1.0-rc.8 with dshloop's plugin and the stub model (tests/stub_model.py: only the LLM
is not real), a profile of `profile` sessions (cold, as a long-lived profile's are: their logs on
disk, found by DSH on a restart; seed_cold_sessions), and per burst size N:
- DSH's own pace: one client sends `session.prompt` (queue) to N fresh idle sessions, one after
  another, as FIELD-NOTES measured it;
- dshloop: N loops (one per fresh idle session) due at one instant, delivered by one `runloops`
  (its plugin delivery, as a person's DSH runs it) with dshloop's web process serving the plugin.
Makespan = the instant (DSH's: its first send) to the last turn's end in DSH's logs; lateness = the
scheduled instant to the message in the session's log; duplicates = a key in a log twice. DSH
calls are counted by a pass-through (bench/dsh_proxy.py) dshloop talks to DSH through. Then the
composer's poll (`POST /dshloop/status`, what DSH Web asks every few seconds) at `poll_profile`
sessions. The numbers go into docs/BENCHMARKS.md's B5 section (the others are left as they are).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from datetime import timedelta
from pathlib import Path

from . import db
from .dsh_proxy import CountingProxy
from .harness import log, setup_django
from .machine import machine_facts
from .proc_stats import cpu_seconds
from .processes import BASE_DIR, free_port, wait_for, wait_ready
from .stats import percentile
from .systems import Dshloop
from .timing import HOUR, now

DATABASE = f"{db.PREFIX}_dsh"


@dataclass(frozen=True)
class DshSizes:
    profiles: tuple[int, ...] = (100, 5_000)
    bursts: tuple[int, ...] = (50, 200, 500)
    poll_profile: int = 10_000
    polls: int = 50


FULL = DshSizes()
QUICK = DshSizes(profiles=(20,), bursts=(5,), poll_profile=40, polls=5)


def sizes_from(quick: bool, profiles: str | None, bursts: str | None, poll_profile: int | None) -> DshSizes:
    base = QUICK if quick else FULL
    return DshSizes(
        profiles=tuple(int(p) for p in profiles.split(",")) if profiles else base.profiles,
        bursts=tuple(int(n) for n in bursts.split(",")) if bursts else base.bursts,
        poll_profile=poll_profile if poll_profile is not None else base.poll_profile,
        polls=base.polls,
    )


class DshTarget(Dshloop):
    """dshloop on DSH: its schedulers and web process talk to DSH through the counting proxy."""

    database = DATABASE

    def __init__(self, dsh_url: str, cwd: str):
        super().__init__()
        self.dsh_url, self.cwd = dsh_url, cwd

    def env(self) -> dict[str, str]:
        return {**super().env(), "DSHLOOP_HOST": "dsh", "DSHLOOP_DSH_URL": self.dsh_url, "DSHLOOP_DSH_CWD": self.cwd}

    def reset(self) -> None:  # DSH holds the sessions: no embedded-host headers to make
        self.conn.execute(f"TRUNCATE {', '.join(self.tables)}")


def run_dsh(sizes: DshSizes, quick: bool, output: Path, keep_database: bool) -> int:
    setup_django(DATABASE)
    from tests.dsh import DshHost, require_dsh_dir
    from tests.stub_model import StubModel

    out_dir = BASE_DIR / "var" / "bench" / time.strftime("%Y%m%d-%H%M%S-dsh")
    out_dir.mkdir(parents=True)
    results: dict = {"machine": machine_facts(), "sizes": asdict(sizes), "quick": quick, "rounds": []}
    install = require_dsh_dir()
    results["machine"]["dsh"] = "0.1.0-rc.8 (" + str(install) + ")"
    token = "dsh_" + secrets.token_urlsafe(32)
    started = time.monotonic()
    with StubModel() as model:
        try:
            for index, profile in enumerate(sizes.profiles):
                last = index == len(sizes.profiles) - 1
                results["rounds"] += one_profile(
                    DshHost,
                    install,
                    model,
                    token,
                    profile,
                    sizes,
                    out_dir / f"profile-{profile}",
                    poll=results if last else None,
                )
        finally:
            results["machine"]["load_average_end"] = os.getloadavg()
            results["elapsed_s"] = time.monotonic() - started
            (out_dir / "results.json").write_text(json.dumps(results, indent=1, default=str))
            if not keep_database:
                from django.db import connection

                connection.close()
                db.drop(DATABASE)
    print(json.dumps(results["rounds"], indent=1, default=str))
    if quick:  # a check of the harness: its numbers never replace a real run's in the report
        output = out_dir / "B5.md"
    splice(output, render(results))
    log(f"B5: done in {(time.monotonic() - started) / 60:.1f} min; raw results in {out_dir}; wrote {output}")
    return 0


def one_profile(DshHost, install, model, token, profile: int, sizes: DshSizes, work: Path, *, poll) -> list[dict]:
    from tokens.management.commands.dsh_plugin_token import PLUGIN_SCOPES, TOKEN_NAME
    from tokens.models import ApiToken, hash_token

    work.mkdir(parents=True)
    home, cwd = work / "dsh-home", work / "workspace"
    cwd.mkdir()
    installed = subprocess.run(
        [str(BASE_DIR / "scripts" / "install-dsh-plugin.sh"), str(install), str(home)], capture_output=True, text=True
    )
    if installed.returncode != 0:
        raise RuntimeError(f"install-dsh-plugin.sh failed:\n{installed.stdout}\n{installed.stderr}")
    web_port = free_port()
    dsh = DshHost(
        install, home, env={**model.env(), "DSHLOOP_URL": f"http://127.0.0.1:{web_port}"}, plugin_token=token
    ).start()
    proxy = CountingProxy(dsh.url)
    system = DshTarget(proxy.url, str(cwd))
    from django.db import connection

    connection.close()  # the database is made again for each profile (DROP … WITH (FORCE))
    system.create_database()
    ApiToken.objects.create(name=TOKEN_NAME, key_hash=hash_token(token), prefix=token[:8], scopes=PLUGIN_SCOPES)
    web = runloops = None
    try:
        log(f"B5: a profile of {profile:,} sessions …")
        made = time.monotonic()
        seed_cold_sessions(dsh, home, [f"profile-{i}" for i in range(profile)], cwd)
        made = time.monotonic() - made
        web = system.start_web(work / "web.log", web_port)
        wait_ready(web, lambda: answers(f"http://127.0.0.1:{web_port}/api/health"), timeout=60, what="web")
        runloops = system.start(work / "runloops.log")
        wait_ready(runloops, lambda: system.ready(runloops), timeout=90, what="runloops")
        rounds, start = [], 0
        for n in sizes.bursts:
            log(f"B5: {n} due at one instant in a profile of {session_count(dsh):,} …")
            rounds.append(burst(dsh, system, proxy, [web, runloops], cwd, n, start, profile))
            rounds[-1]["profile_made_s"] = made
            start += n
        if poll is not None:
            grow = sizes.poll_profile - session_count(dsh)
            if grow > 0:
                log(f"B5: growing the profile to {sizes.poll_profile:,} sessions for the composer poll …")
                seed_cold_sessions(dsh, home, [f"poll-{i}" for i in range(grow)], cwd)
            poll["poll"] = composer_poll(dsh, proxy, sizes.polls)
        return rounds
    finally:
        for process in (runloops, web):
            if process is not None:
                process.stop()
        if system.conn is not None:
            system.conn.close()
        proxy.close()
        dsh.stop()


def answers(url: str) -> bool:
    import urllib.error
    import urllib.request

    try:
        urllib.request.urlopen(url, timeout=2).close()
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False
    return True


def create_sessions(dsh, ids: list[str], cwd: Path) -> None:
    with ThreadPoolExecutor(8) as pool:  # DSH takes creates side by side
        list(pool.map(lambda sid: dsh.call("session.create", {"sessionId": sid, "cwd": str(cwd)}, timeout=60), ids))


def seed_cold_sessions(dsh, home: Path, ids: list[str], cwd: Path) -> None:
    """`ids` as a long-lived profile holds them: cold sessions, each only its log on disk. DSH makes
    the first (session.create); the others are its log under their own ID and creation time, written
    beside it; then DSH is restarted and finds them all. rc.8 rewrites its whole projection cache on
    each create, so creates slow down as the profile grows (about 2 a second at 1,700 sessions here):
    a 5,000-session profile took most of an hour to make, where these files take seconds."""
    if shutil.which("zstd") is None:
        raise RuntimeError("the zstd command is needed to write DSH's session logs (Debian: apt-get install zstd)")
    template_id, others = ids[0], ids[1:]
    create_sessions(dsh, [template_id], cwd)
    dsh.restart()  # DSH writes a session's log to disk as it lets it go
    [template] = home.glob(f"sessions/*/{template_id}/session.jsonl.zstd")
    log_text = subprocess.run(["zstd", "-dcq", str(template)], capture_output=True, check=True, text=True).stdout
    first_line, _, rest = log_text.partition("\n")
    header = json.loads(first_line)
    # A log is zstd frames, the first exactly the header line: each session's own header frame, then
    # the template's events (the same for every fresh session) as one frame.
    events_frame = subprocess.run(["zstd", "-cq"], input=rest.encode(), capture_output=True, check=True).stdout
    headers = []
    for offset, session_id in enumerate(others, start=1):
        folder = template.parent.parent / session_id
        folder.mkdir()
        fields = {**header, "id": session_id, "createdAt": header["createdAt"] + offset}
        headers.append(folder / "header.jsonl")
        headers[-1].write_text(json.dumps(fields, separators=(",", ":")) + "\n")
    for chunk in range(0, len(headers), 500):  # one zstd per 500 headers; --rm keeps only the frames
        subprocess.run(["zstd", "-q", "--rm", *map(str, headers[chunk : chunk + 500])], check=True)
    for path in headers:
        frame = path.with_name("header.jsonl.zst")
        path.with_name("session.jsonl.zstd").write_bytes(frame.read_bytes() + events_frame)
        frame.unlink()
    dsh.restart()


def session_count(dsh) -> int:
    return len(dsh.call("session.list", {}, timeout=120)["items"])


def answered(dsh, session_id: str, key: str | None) -> tuple[int | None, int | None, int]:
    """(message time, its turn's end time, how many messages carry the key) in a session's log, in
    DSH's epoch ms; the key is the plugin's deliveryKey or the prompt's rpcId; None: the first user message."""
    events = dsh.history(session_id)
    starts = [
        e
        for e in events
        if e["type"] == "user/message"
        and (
            key is None
            or key in (e["data"].get("source", {}).get("deliveryKey"), e["data"].get("source", {}).get("rpcId"))
        )
    ]
    if not starts:
        return None, None, 0
    first = starts[0]
    end = next((e["time"] for e in events if e["type"] == "turn/end" and e["seq"] > first["seq"]), None)
    return first["time"], end, len(starts)


def wait_answered(dsh, pairs: list[tuple[str, str | None]], timeout: float) -> list[tuple[int | None, int | None, int]]:
    found: dict[int, tuple] = {}

    def done() -> bool:
        for index, (session_id, key) in enumerate(pairs):
            if index not in found:
                result = answered(dsh, session_id, key)
                if result[1] is not None:
                    found[index] = result
        return len(found) == len(pairs)

    wait_for(done, timeout=timeout, interval=0.5)
    return [found.get(index) or answered(dsh, *pair) for index, pair in enumerate(pairs)]


def burst(dsh, system: DshTarget, proxy: CountingProxy, processes, cwd: Path, n: int, start: int, profile: int) -> dict:
    own = [f"own-{start + i}" for i in range(n)]
    targets = [f"ses_bench_{(start + i) % 1000:04d}" for i in range(n)]
    create_sessions(dsh, own + targets, cwd)
    profile_now = session_count(dsh)
    # DSH's own pace: one client, one prompt after another.
    sent_at = time.time()
    for session_id in own:
        dsh.call(
            "session.prompt",
            {"sessionId": session_id, "mode": "queue", "content": [{"type": "text", "text": "bench"}]},
            rpc_id=f"own-{session_id}",
        )
    send_s = time.time() - sent_at
    theirs = wait_answered(dsh, [(s, f"own-{s}") for s in own], timeout=60 + n)
    own_ends = [end for _, end, _ in theirs if end is not None]
    own_lateness = [(at - sent_at * 1000) / 1000 for at, _, _ in theirs if at is not None]
    # dshloop: N loops due together.
    due = now() + timedelta(seconds=5)
    system.add_every(n, period_s=HOUR, first_at=due, spread_s=0, start=start)
    system.wake()
    trees = [pid for process in processes for pid in process.tree()]
    cpu_before, calls_before = cpu_seconds(trees), proxy.snapshot()
    wait_for(lambda: system.delivered_count() >= start + n, timeout=5 + 120 + 2 * n, interval=0.25)
    runs = system.conn.execute(
        "SELECT l.session_id, r.occurrence_key, r.scheduled_at, r.finished_at, r.status, r.started_at"
        " FROM loops_looprun r"
        " JOIN loops_loop l USING (loop_id) WHERE l.loop_id >= %s AND l.loop_id < %s",
        [f"loop_bench_{start:08d}", f"loop_bench_{start + n:08d}"],
    ).fetchall()
    ours = wait_answered(dsh, [(session_id, key) for session_id, key, *_ in runs], timeout=60 + n)
    cpu = cpu_seconds([pid for process in processes for pid in process.tree()]) - cpu_before
    calls = proxy.snapshot() - calls_before
    due_ms = due.timestamp() * 1000
    trace = [
        (round(a - due.timestamp(), 3), round(b - a, 3), path) for a, b, path in proxy.trace if a > due.timestamp() - 1
    ]
    ends = [end for _, end, _ in ours if end is not None]
    lateness = [(at - due_ms) / 1000 for at, _, _ in ours if at is not None]
    recorded = [(finished - scheduled).total_seconds() for _, _, scheduled, finished, *_ in runs if finished]
    # When a driver took the run (claim, queue, a worker): the part of lateness before DSH is called.
    taken = [(started - scheduled).total_seconds() for _, _, scheduled, _, _, started in runs if started]
    result = {
        "n": n,
        "profile": profile_now,
        "cold_profile": profile,
        "own_makespan_s": (max(own_ends) - sent_at * 1000) / 1000 if len(own_ends) == n else None,
        "own_send_s": send_s,
        "own_lateness_p50_s": percentile(own_lateness, 50),
        "own_lateness_p99_s": percentile(own_lateness, 99),
        "makespan_s": (max(ends) - due_ms) / 1000 if len(ends) == n else None,
        "answered": len(ends),
        "delivered": sum(1 for *_, status, _ in runs if status == "delivered"),
        "lateness_p50_s": percentile(lateness, 50),
        "lateness_p99_s": percentile(lateness, 99),
        "recorded_p99_s": percentile(recorded, 99),
        "taken_p50_s": percentile(taken, 50),
        "taken_p99_s": percentile(taken, 99),
        "cpu_per_occurrence_ms": 1000 * cpu / n,
        "dsh_calls_per_occurrence": sum(calls.values()) / n,
        "dsh_calls_by_method": {k: round(v / n, 2) for k, v in calls.most_common()},
        "session_list_calls": calls.get("session.list", 0),
        "duplicates": sum(max(0, count - 1) for *_, count in ours),
        "trace": trace[:400],  # the first DSH calls after the instant: (s after it, s taken, call)
    }
    own_ms, ours_ms = result["own_makespan_s"], result["makespan_s"]
    result["ratio"] = ours_ms / own_ms if own_ms and ours_ms else None
    log(f"B5: N={n}: dshloop {ours_ms} s, DSH's own {own_ms} s, p99 lateness {result['lateness_p99_s']}")
    return result


def composer_poll(dsh, proxy: CountingProxy, polls: int) -> dict:
    """DSH Web's composer status: `POST /dshloop/status {sessionId}` through DSH's channel, which asks
    dshloop's `loop_list {}` as that session (its caller check asks DSH about that session)."""
    import urllib.request

    session_id = "ses_bench_0000"
    body = json.dumps(
        {"type": "client-request", "rpcId": "poll", "method": "status", "payload": {"sessionId": session_id}}
    )
    times, before = [], proxy.snapshot()
    for _ in range(polls):
        request = urllib.request.Request(
            dsh.url + "/dshloop/status", data=body.encode(), headers={"Content-Type": "application/json"}, method="POST"
        )
        began = time.perf_counter()
        with urllib.request.urlopen(request, timeout=60) as response:
            answer = json.load(response)
        times.append(time.perf_counter() - began)
        assert answer["result"]["ok"], answer
    calls = proxy.snapshot() - before
    listed = time.perf_counter()
    count = session_count(dsh)
    listed = time.perf_counter() - listed
    return {
        "profile": count,
        "p50_ms": 1000 * percentile(times, 50),
        "p99_ms": 1000 * percentile(times, 99),
        "dsh_calls_per_poll": sum(calls.values()) / polls,
        "dsh_calls_by_method": {k: round(v / polls, 2) for k, v in calls.most_common()},
        "session_list_ms": 1000 * listed,
    }


def render(results: dict) -> str:
    from .dsh_report import render_b5

    return render_b5(results)


def splice(output: Path, section: str) -> None:
    """Replace the B5 section of the report (or add it before the B5 notes, else before "Targets
    missed"), leaving the rest."""
    text = output.read_text() if output.exists() else "# Benchmarks\n"
    pattern = re.compile(r"^## B5 delivery.*?(?=^## |\Z)", re.S | re.M)
    if pattern.search(text):
        text = pattern.sub(lambda _: section, text, count=1)
    elif "\n## B5, where" in text:  # the notes written by hand on a run stay after its numbers
        text = text.replace("\n## B5, where", "\n" + section + "## B5, where", 1)
    elif "\n## Targets missed" in text:
        text = text.replace("\n## Targets missed", "\n" + section + "## Targets missed", 1)
    else:
        text = text.rstrip("\n") + "\n\n" + section
    output.write_text(text)


if __name__ == "__main__":
    sys.exit(run_dsh(QUICK, True, BASE_DIR / "docs" / "BENCHMARKS.md", False))
