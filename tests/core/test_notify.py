"""While PostgreSQL is unreachable (a restart) the LISTEN connections and the NOTIFY-woken broker
wait with backoff: no busy loop, no dead pusher or monitor. End to end, against a real server
restart: tests/reliability/test_pg_restart.py.

Time is simulated (sleeping advances a fake monotonic clock), so these tests take no real time.
"""

from __future__ import annotations

import threading
from types import SimpleNamespace

import psycopg
import pytest
from django.db import OperationalError

from core import notify
from core.notify import CLOCK_CHANNEL, Listener
from scheduler import broker, clock


class FakeTime:
    def __init__(self):
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def fake_time(monkeypatch) -> FakeTime:
    fake = FakeTime()
    for module in (notify, clock, broker):
        monkeypatch.setattr(module, "time", fake)
    return fake


class Server:
    """Stands in for Listener._connect: refused at once while down (as a stopped server is)."""

    def __init__(self, fake_time: FakeTime):
        self.fake_time = fake_time
        self.up = False
        self.attempts: list[float] = []  # when, in simulated seconds

    def connect(self, listener: Listener) -> None:
        self.attempts.append(self.fake_time.now)
        if not self.up:
            raise psycopg.OperationalError("connection refused")
        listener.conn = SimpleNamespace(closed=False, close=lambda: None)


@pytest.fixture
def server(fake_time, monkeypatch) -> Server:
    server = Server(fake_time)
    monkeypatch.setattr(Listener, "_connect", lambda listener: server.connect(listener))
    return server


def test_listener_waits_out_its_timeout_and_reconnects_with_backoff_while_the_server_is_down(fake_time, server):
    listener = Listener(CLOCK_CHANNEL)
    start = fake_time.now
    answers = [listener.wait(0.5) for _ in range(40)]

    # Nothing to look at while the server is down, and every wait takes its half second (a wait
    # that returned at once would make its caller spin).
    assert answers == [False] * 40
    assert fake_time.now - start == pytest.approx(20)
    # Connection attempts back off (notify.RECONNECT_BACKOFF), they are not made on every wait.
    assert [at - start for at in server.attempts] == pytest.approx([0, 0.5, 1.5, 3.5, 8.5, 18.5])

    # The server is back: the next attempt (28.5 s in) connects and says "look now", since what
    # was notified during the outage is lost.
    server.up = True
    answers = [listener.wait(0.5) for _ in range(18)]
    assert answers == [False] * 17 + [True]
    assert server.attempts[-1] - start == pytest.approx(28.5)
    assert listener.failures == 0 and listener.conn is not None


def test_clock_backoff_sleep_lasts_its_length_while_the_database_is_down(fake_time, server):
    # Clock.run sleeps ERROR_BACKOFF seconds after a database error; that sleep must last its length
    # even though a failed reconnect answers "look now", or the clock would retry in a tight loop.
    waker = clock.Waker(threading.Event())
    waker.listener = Listener(CLOCK_CHANNEL)  # the PostgreSQL waker, on either test database
    start = fake_time.now
    waker.sleep(5)
    assert fake_time.now - start == pytest.approx(5)


@pytest.fixture
def orm_broker(db, fake_time, monkeypatch):
    monkeypatch.setattr(broker, "can_listen", lambda: True)  # the PostgreSQL path, on either database
    return broker.NotifyingORM()


def raise_database_error(*args, **kwargs):
    raise OperationalError("connection failed: Connection refused")


def test_dequeue_waits_out_a_database_error_instead_of_raising_into_the_pusher(orm_broker, fake_time, monkeypatch):
    # django-q2's pusher logs a raised error, sleeps 10 s and exits; deliveries then stall until
    # the sentinel has started a new one.
    monkeypatch.setattr(orm_broker, "_take", raise_database_error)
    monkeypatch.setattr(orm_broker.listener, "wait", lambda timeout: False)
    assert orm_broker.dequeue() is None
    assert orm_broker.look_at == pytest.approx(fake_time.now + broker.ERROR_RECHECK)

    # The database is back: the next look after ERROR_RECHECK takes the tasks.
    monkeypatch.setattr(orm_broker, "_take", lambda: [(1, "payload")])
    fake_time.sleep(broker.ERROR_RECHECK)
    assert orm_broker.dequeue() == [(1, "payload")]


def test_acknowledge_survives_a_database_error_instead_of_killing_the_monitor(orm_broker, monkeypatch):
    monkeypatch.setattr(orm_broker, "delete", raise_database_error)
    assert orm_broker.acknowledge(42) is None


@pytest.mark.django_db(transaction=True)
def test_a_notification_sent_between_listen_and_wait_wakes_the_wait():
    """The clock listens before each tick reads: a change committed after that read (a delivery
    that makes a loop claimable again) wakes the sleep that follows. A listener that connects only
    when its first wait begins has missed it, and the clock slept its whole MAX_SLEEP."""
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("LISTEN/NOTIFY is PostgreSQL's; SQLite's clock polls")
    listening, late = Listener(CLOCK_CHANNEL), Listener(CLOCK_CHANNEL)
    try:
        listening.listen()
        notify.notify_clocks()  # autocommit: sent at once
        assert listening.wait(5) is True
        assert late.wait(0.2) is False  # it connected after the notification: lost
    finally:
        listening.close()
        late.close()
