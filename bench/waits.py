"""What the database's backends wait for during a benchmark: pg_stat_activity sampled in a thread.

Each sample counts the backends of one database that are running a statement, by what they wait
for (`CPU` when they wait for nothing: running or runnable), and those waiting for a lock by the
statement they wait in. The shares say where concurrent schedulers lose time to each other (lock
waits, claim collisions) rather than to work.
"""

from __future__ import annotations

import threading
from collections import Counter

from . import db

INTERVAL_S = 0.01


class WaitSampler:
    def __init__(self, database: str) -> None:
        self.database = database
        self.samples = 0
        self.states: Counter[str] = Counter()
        self.lock_waits: Counter[str] = Counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> WaitSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        with db.server() as conn:
            while not self._stop.wait(INTERVAL_S):
                rows = conn.execute(
                    "SELECT wait_event_type, wait_event, left(regexp_replace(query, '\\s+', ' ', 'g'), 60) "
                    "FROM pg_stat_activity WHERE datname = %s AND state = 'active' AND pid <> pg_backend_pid()",
                    [self.database],
                ).fetchall()
                self.samples += 1
                for kind, event, query in rows:
                    self.states[f"{kind}:{event}" if kind else "CPU"] += 1
                    if kind == "Lock":
                        self.lock_waits[f"{event}: {query}"] += 1

    def summary(self) -> dict:
        """Average backends per sample in each state, and the lock waits by statement."""
        per = max(self.samples, 1)
        return {
            "samples": self.samples,
            "active": {name: count / per for name, count in self.states.most_common()},
            "lock_waits": {name: count / per for name, count in self.lock_waits.most_common(8)},
        }
