"""django-q2's ORM broker, woken by NOTIFY instead of polling (FIELD-NOTES: its pusher polls the
queue table every 0.2 s — hundreds of statements a minute while idle, and up to 0.2 s of
latency per delivery).

Enqueueing sends a NOTIFY in the enqueuing (claim) transaction; an idle pusher sleeps on LISTEN
and takes the tasks the moment the claim commits. It still looks at the table every
IDLE_RECHECK seconds, for tasks whose lease expired (a worker died) and for missed wake-ups.
On SQLite it behaves like the stock ORM broker.
"""

from __future__ import annotations

import time
from datetime import timedelta

from django.utils import timezone
from django_q.brokers.orm import ORM
from django_q.conf import Conf

from .notify import TASKS_CHANNEL, Listener, can_listen, notify

IDLE_RECHECK = 60.0  # well inside django-q2's task lock (`retry`, 120 s)
# dequeue() returns at least this often, so that the pusher sees a stop request in time.
WAIT_SLICE = 1.0


class NotifyingORM(ORM):
    def __init__(self, list_key: str = None):
        super().__init__(list_key=list_key)
        self.listener = Listener(TASKS_CHANNEL)
        self.look_at = 0.0  # monotonic time of the next look at the table

    def enqueue(self, task):
        package_id = super().enqueue(task)
        notify(TASKS_CHANNEL)  # delivered when the enqueuing transaction commits
        return package_id

    def _take(self):
        """Lock up to BULK due tasks (compare-and-swap on their lock, as the stock broker does)."""
        now = timezone.now()
        queue = self.get_connection()
        taken = []
        for task in queue.filter(key=self.list_key, lock__lt=now)[: Conf.BULK]:
            if queue.filter(id=task.id, lock=task.lock).update(lock=now + timedelta(seconds=Conf.RETRY)):
                taken.append((task.pk, task.payload))
        return taken

    def dequeue(self):
        if not can_listen():
            return super().dequeue()
        if time.monotonic() >= self.look_at:
            tasks = self._take()
            if tasks:
                self.look_at = 0.0  # there may be more: look again at once
                return tasks
            self.look_at = time.monotonic() + IDLE_RECHECK
        if self.listener.wait(WAIT_SLICE):
            self.look_at = 0.0
        return None
