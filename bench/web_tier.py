"""The web tier with and without reading bodies first (dshloop.request_bodies), side by side.

Two uvicorn processes on one SQLite database: `dshloop.asgi:application` (bodies read in the event
loop, then Django in a2wsgi's threads) and `bench.web_tier:unguarded` (the same bridge without
that step). For each: POST /api/tools/loop_list latency one client at a time and with several
concurrent clients, then the same request while idle clients (headers announcing a body, no body)
are connected; the counts are bench.sizes.WEB_TIER. Results go to docs/BENCHMARKS-WEB.md.

    .venv/bin/python -m bench.web_tier [--requests 2000]
"""

from __future__ import annotations

import argparse
import os
import platform
import socket
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from bench.processes import BASE_DIR, Process, free_port, manage, uvicorn_args, wait_ready
from bench.sizes import WEB_TIER

REPORT = BASE_DIR / "docs" / "BENCHMARKS-WEB.md"
IDLE_CLIENTS = WEB_TIER.idle_clients
IDLE_PROBE_TIMEOUT = 5.0


def _unguarded():
    """The Django bridge without reading bodies first: a2wsgi reads the body from a worker thread."""
    from a2wsgi import WSGIMiddleware

    from dshloop.asgi import a2wsgi_environ
    from dshloop.wsgi import application

    return WSGIMiddleware(a2wsgi_environ(application))


def __getattr__(name: str):  # uvicorn imports `bench.web_tier:unguarded` only in its own process
    if name == "unguarded":
        return _unguarded()
    raise AttributeError(name)


def prepare(var_dir: Path) -> tuple[dict, str]:
    env = {**os.environ, "DSHLOOP_VAR_DIR": str(var_dir), "DJANGO_SETTINGS_MODULE": "dshloop.settings"}
    env.pop("DATABASE_URL", None)
    manage("migrate", "--noinput", env=env)
    make_token = "from tokens.services import token_create; print(token_create(name='bench', scopes=['tools'])[1])"
    token = manage("shell", "-c", make_token, env=env).split()[-1]  # after the shell's own notices
    return env, token


def start(app: str, env: dict, log_path: Path) -> tuple[Process, str]:
    """uvicorn serving `app` on a free port, answering."""
    port = free_port()
    process = Process(uvicorn_args(app, port, "--log-level=warning"), env=env, log_path=log_path)
    base = f"http://127.0.0.1:{port}"

    def answers() -> bool:
        try:
            httpx.get(base + "/api/health", timeout=2)
        except httpx.HTTPError:
            return False
        return True

    try:
        wait_ready(process, answers, timeout=60, what=app)
    except RuntimeError:
        process.stop()
        raise
    return process, base


def timed_calls(base: str, token: str, *, count: int, clients: int, timeout: float = 30) -> list[float]:
    headers = {"Authorization": f"Bearer {token}"}

    def one_client(calls: int) -> list[float]:
        times = []
        with httpx.Client(base_url=base, headers=headers, timeout=timeout) as client:
            for _ in range(calls):
                started = time.perf_counter()
                try:
                    client.post("/api/tools/loop_list", json={"session_id": "global"}).raise_for_status()
                except httpx.TimeoutException:
                    times.append(float("inf"))
                    continue
                times.append(time.perf_counter() - started)
        return times

    with ThreadPoolExecutor(clients) as pool:
        return [t for batch in pool.map(one_client, [count // clients] * clients) for t in batch]


def idle_sockets(base: str, token: str) -> list[socket.socket]:
    port = int(base.rsplit(":", 1)[1])
    sockets = []
    for _ in range(IDLE_CLIENTS):
        sock = socket.create_connection(("127.0.0.1", port))
        sock.sendall(
            f"POST /api/tools/loop_list HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\nContent-Length: 100\r\n\r\n".encode()
        )
        sockets.append(sock)
    return sockets


def ms(seconds: float) -> str:
    return "no answer" if seconds == float("inf") else f"{seconds * 1000:.2f} ms"


ROUNDS = WEB_TIER.rounds  # the servers take turns, so that a noisy moment falls on both


def measure(servers: dict[str, str], token: str, requests: int) -> dict[str, dict[str, str]]:
    alone: dict[str, list[float]] = {label: [] for label in servers}
    together: dict[str, list[float]] = {label: [] for label in servers}
    for base in servers.values():
        timed_calls(base, token, count=WEB_TIER.warm_up, clients=1)  # warm-up: connections, imports, caches
    for _ in range(ROUNDS):
        for label, base in servers.items():
            alone[label] += timed_calls(base, token, count=requests // ROUNDS, clients=1)
            together[label] += timed_calls(base, token, count=requests // ROUNDS, clients=WEB_TIER.concurrent_clients)
    results = {}
    for label, base in servers.items():
        held = idle_sockets(base, token)
        try:
            while_idle = sorted(
                timed_calls(base, token, count=WEB_TIER.idle_probes, clients=1, timeout=IDLE_PROBE_TIMEOUT)
            )
        finally:
            for sock in held:
                sock.close()
        one, many = sorted(alone[label]), sorted(together[label])
        clients = WEB_TIER.concurrent_clients
        results[label] = {
            "1 client p50": ms(statistics.median(one)),
            "1 client p99": ms(one[int(len(one) * 0.99) - 1]),
            f"{clients} clients p50": ms(statistics.median(many)),
            f"{clients} clients p99": ms(many[int(len(many) * 0.99) - 1]),
            f"with {IDLE_CLIENTS} idle clients p50": ms(statistics.median(while_idle)),
        }
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=WEB_TIER.requests)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        env, token = prepare(Path(tmp) / "var")
        apps = {
            "bodies read first (now)": "dshloop.asgi:application",
            "unguarded bridge (before)": "bench.web_tier:unguarded",
        }
        started = {}
        try:
            for index, (label, app) in enumerate(apps.items()):
                started[label] = start(app, env, Path(tmp) / f"uvicorn-{index}.log")
            results = measure({label: base for label, (_, base) in started.items()}, token, args.requests)
        finally:
            for process, _ in started.values():
                process.stop()
    rows = list(next(iter(results.values())))
    lines = [
        "# Web tier: request bodies read first",
        "",
        '`python -m bench.web_tier` (bench/web_tier.py): POST /api/tools/loop_list `{"session_id": "global"}`',
        f"on an empty SQLite database, {args.requests} requests per row, both servers up at once and taking turns ({ROUNDS} rounds).",
        f'"With {IDLE_CLIENTS} idle clients": the same request while {IDLE_CLIENTS} connections have sent headers announcing a',
        f'100-byte body and nothing more (a request not answered within {IDLE_PROBE_TIMEOUT:g} s counts as "no answer").',
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.",
        "",
        "| | " + " | ".join(results) + " |",
        "|---|" + "---|" * len(results),
    ]
    lines += [f"| {row} | " + " | ".join(result[row] for result in results.values()) + " |" for row in rows]
    REPORT.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
