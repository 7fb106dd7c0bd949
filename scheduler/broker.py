"""django-q2's ORM broker, woken by NOTIFY instead of polling (FIELD-NOTES: its pusher polls the
queue table every 0.2 s — hundreds of statements a minute while idle, and up to 0.2 s of
latency per delivery).

Enqueueing sends a NOTIFY in the enqueuing (claim) transaction; an idle pusher sleeps on LISTEN
and takes the tasks the moment the claim commits. It still looks at the table every
IDLE_RECHECK seconds, for tasks whose lease expired (a worker died) and for missed wake-ups.
On SQLite it behaves like the stock ORM broker.

While the database is gone (a restart) the pusher and the monitor keep running and wait for it:
django-q2 lets a broker error kill them (the pusher sleeps 10 s first), and the sentinel respawns
them, which stalls deliveries after every database blip.
"""

from __future__ import annotations

import logging
import time
from datetime import timedelta

from django.db import DatabaseError
from django.utils import timezone
from django_q.brokers.orm import ORM
from django_q.conf import Conf

from core.notify import TASKS_CHANNEL, Listener, can_listen, notify

logger = logging.getLogger("dshloop.broker")

IDLE_RECHECK = 60.0  # well inside django-q2's task lock (`retry`, 120 s)
# dequeue() returns at least this often, so that the pusher sees a stop request in time.
WAIT_SLICE = 1.0
# After a database error, look at the table again this soon (or as soon as the listener is back).
ERROR_RECHECK = 5.0


# A task on the queue as django-q2 hands it to its pusher: its row's key and its signed payload.
Task = tuple[int, str]


class NotifyingORM(ORM):  # type: ignore[misc]  # django-q2 ships no types: its ORM broker is Any to mypy
    def __init__(self, list_key: str | None = None) -> None:
        super().__init__(list_key=list_key)
        self.listener = Listener(TASKS_CHANNEL)
        self.look_at = 0.0  # monotonic time of the next look at the table

    def enqueue(self, task: str) -> int:
        package_id: int = super().enqueue(task)
        notify(TASKS_CHANNEL)  # delivered when the enqueuing transaction commits
        return package_id

    def _take(self) -> list[Task]:
        """Lock up to BULK due tasks (compare-and-swap on their lock, as the stock broker does)."""
        now = timezone.now()
        queue = self.get_connection()
        taken: list[Task] = []
        for task in queue.filter(key=self.list_key, lock__lt=now)[: Conf.BULK]:
            if queue.filter(id=task.id, lock=task.lock).update(lock=now + timedelta(seconds=Conf.RETRY)):
                taken.append((task.pk, task.payload))
        return taken

    def dequeue(self) -> list[Task] | None:
        if not can_listen():
            stock: list[Task] | None = super().dequeue()
            return stock
        if time.monotonic() >= self.look_at:
            try:
                tasks = self._take()
            except DatabaseError as exc:
                # Raised, this would end django-q2's pusher after a 10 s sleep (see above). The
                # broken connection is replaced by the next _take (get_connection closes it).
                logger.warning("task queue unavailable (%s); looking again within %ss", str(exc).strip(), ERROR_RECHECK)
                self.look_at = time.monotonic() + ERROR_RECHECK
            else:
                if tasks:
                    self.look_at = 0.0  # there may be more: look again at once
                    return tasks
                self.look_at = time.monotonic() + IDLE_RECHECK
        if self.listener.wait(WAIT_SLICE):
            self.look_at = 0.0
        return None

    def acknowledge(self, task_id: int) -> None:
        try:
            super().acknowledge(task_id)
        except DatabaseError as exc:
            # Raised, this would kill django-q2's monitor. Unacknowledged, the task is handed out
            # again once its lock (`retry`) runs out, and driving its runs again does nothing:
            # they are finished, or leased to whoever drives them now.
            logger.warning("could not acknowledge task %s (%s)", task_id, str(exc).strip())
            return None
