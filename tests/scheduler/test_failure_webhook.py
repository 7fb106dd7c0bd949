"""The operators' failure webhook (contract §16) against a real loopback HTTP server: a loop that
pauses itself is POSTed as signed JSON; a receiver answering 500 twice and then 200 gets the same
event three times (with backoff) and it is recorded sent; one that never takes it is given up after
DSHLOOP_FAILURE_WEBHOOK_RETRY_SECONDS, logged without the secret and counted in /metrics; and under
a real `runloops`, a webhook that hangs and fails beside an ordinary loop leaves it on time."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import time_machine
from django.utils import timezone

from core.timeutil import to_ms
from loops.counters import WEBHOOK_ATTEMPT_FAILED, read_counters, webhook_name
from loops.models import FailureEpisode, LoopRun, RunStatus
from scheduler.failure_webhook import WebhookSender
from sessions_app.services import session_upsert
from tests.conftest import T0, captured_log, create_loop, every, fire_due, s
from tests.processes import wait_for

SECRET = "whsec-test-not-logged"
TOKEN_IN_PATH = "T0KEN-IN-PATH"


class Receiver:
    """A loopback HTTP server that records each POST and answers the next scripted status (the last
    repeats), after `delay` seconds."""

    def __init__(self, statuses: list[int], *, delay: float = 0.0):
        self.statuses, self.delay = list(statuses), delay
        self.requests: list[tuple[dict[str, str], bytes]] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                with receiver.lock:
                    receiver.requests.append(({k.lower(): v for k, v in self.headers.items()}, body))
                    status = receiver.statuses.pop(0) if len(receiver.statuses) > 1 else receiver.statuses[0]
                time.sleep(receiver.delay)
                try:
                    self.send_response(status)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                except OSError:
                    pass  # the client gave up waiting

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hooks/{TOKEN_IN_PATH}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver(request):
    made: list[Receiver] = []

    def start(statuses: list[int], **options) -> Receiver:
        made.append(Receiver(statuses, **options))
        return made[-1]

    yield start
    for server in made:
        server.close()


@pytest.fixture
def webhook_to(settings):
    def configure(url: str) -> None:
        settings.DSHLOOP_FAILURE_WEBHOOK_URL, settings.DSHLOOP_FAILURE_WEBHOOK_SECRET = url, SECRET
        settings.DSHLOOP_FAILURE_WEBHOOK_TIMEOUT_SECONDS = 2
        settings.DSHLOOP_FAILURE_NOTICES = False

    return configure


@pytest.fixture
def auto_paused(make, host_api, settings):
    """A loop whose two turns failed, so that it paused itself; its failure episode."""
    settings.DSHLOOP_AUTO_PAUSE_AFTER = 2

    def make_it() -> FailureEpisode:
        loop_id = make(every(60))["loop_id"]
        for n in (1, 2):
            run = fire_due(loop_id, T0 + s(60 * n))
            with time_machine.travel(T0 + s(60 * n + 2), tick=False):
                response = host_api.post(
                    f"/api/host/runs/{run.run_id}/outcome", {"status": "failed", "error": "stub refuses"}
                )
            assert response.status_code == 200
        # The clock was frozen in the past: the failure is moved to now, whence the retries are bounded.
        FailureEpisode.objects.filter(loop_id=loop_id).update(at=timezone.now())
        return FailureEpisode.objects.get(loop_id=loop_id)

    return make_it


def verifies(headers: dict[str, str], body: bytes) -> bool:
    """The receiver's check, as docs/operating.md shows it."""
    expected = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(headers.get("x-dshloop-signature", ""), expected)


def test_a_receiver_answering_500_twice_then_200_gets_the_signed_event_three_times(
    receiver, webhook_to, auto_paused, db
):
    server = receiver([500, 500, 200])
    webhook_to(server.url)
    episode = auto_paused()
    sender = WebhookSender()

    def posted_and_recorded():
        sender.step()
        episode.refresh_from_db()
        return episode.webhook_status != "pending"

    wait_for(posted_and_recorded, timeout=20, interval=0.1, message="the webhook to be taken")

    assert episode.webhook_status == "sent" and episode.webhook_attempts == 3
    assert len(server.requests) == 3
    bodies = {body for _, body in server.requests}
    assert len(bodies) == 1  # the same event each time
    [body] = bodies
    assert json.loads(body) == {
        "event": "loop_auto_paused",
        "loop_id": episode.loop_id,
        "run_id": episode.run_id,
        "error": "stub refuses",
        "consecutive_failures": 2,
        "at": to_ms(episode.at),
    }
    for headers, sent in server.requests:
        assert verifies(headers, sent)
        assert headers["content-type"] == "application/json"
        assert headers["x-dshloop-event-id"] == episode.key
    assert not verifies(server.requests[0][0], body.replace(b"stub", b"stab"))  # a forged body fails
    totals = read_counters()
    assert totals[webhook_name("sent")] == 1 and totals[webhook_name(WEBHOOK_ATTEMPT_FAILED)] == 2
    assert sender.step() is False and len(server.requests) == 3  # nothing owed any more


def test_an_event_never_taken_is_given_up_logged_without_the_secret_and_counted(
    receiver, webhook_to, auto_paused, settings, caplog, db
):
    server = receiver([503])
    webhook_to(server.url)
    settings.DSHLOOP_FAILURE_WEBHOOK_RETRY_SECONDS = 1
    episode = auto_paused()
    sender = WebhookSender()

    with captured_log(caplog, "dshloop.webhook"):

        def given_up():
            sender.step()
            episode.refresh_from_db()
            return episode.webhook_status == "failed"

        wait_for(given_up, timeout=20, interval=0.1, message="the event to be given up")

    assert len(server.requests) >= 1 and episode.webhook_error == "HTTP 503"
    assert read_counters()[webhook_name("failed")] == 1
    lines = [record.getMessage() for record in caplog.records if record.name == "dshloop.webhook"]
    assert lines and "given up" in lines[-1] and "HTTP 503" in lines[-1]
    assert all(SECRET not in line and TOKEN_IN_PATH not in line for line in lines)
    assert f"127.0.0.1:{server.server.server_address[1]}" in lines[-1]


def test_a_notice_and_its_webhook_come_from_one_episode_each_sent_once(receiver, webhook_to, auto_paused, settings):
    server = receiver([200])
    webhook_to(server.url)
    settings.DSHLOOP_FAILURE_NOTICES = True
    episode = auto_paused()
    assert (episode.notice_status, episode.webhook_status) == ("pending", "pending")
    sender = WebhookSender()
    wait_for(lambda: not sender.step() and len(server.requests) == 1, timeout=10, message="one POST")
    episode.refresh_from_db()
    assert (episode.notice_status, episode.webhook_status) == ("pending", "sent")  # each channel on its own


@pytest.mark.process
def test_a_hanging_failing_webhook_beside_leaves_ordinary_deliveries_on_time(receiver, transactional_db, tmp_path):
    """Real `runloops`: a receiver that holds every POST past the client's timeout, with events
    owed all along, beside a loop every 2 s: each of its occurrences is delivered on its grid."""
    from tests.processes import Schedulers

    server = receiver([500], delay=3.0)
    now = timezone.now()
    FailureEpisode.objects.bulk_create(
        FailureEpisode(
            key=f"loop_x{n}@notice:run_x{n}",
            loop_id=f"loop_x{n}",
            run_id=f"run_x{n}",
            event="loop_auto_paused",
            at=now,
            error="stub refuses",
            webhook_status="pending",
            webhook_due_at=now,
        )
        for n in range(4)
    )
    session_upsert(session_id="ses_ordinary", changes={"status": "idle"})
    loop = create_loop(every(2), target="ses_ordinary")
    schedulers = Schedulers(
        tmp_path,
        DSHLOOP_HOST="local",
        DSHLOOP_FAILURE_WEBHOOK_URL=server.url,
        DSHLOOP_FAILURE_WEBHOOK_SECRET=SECRET,
        DSHLOOP_FAILURE_WEBHOOK_TIMEOUT_SECONDS="1",
    )
    try:
        [scheduler] = schedulers.start_ready(1)
        started = timezone.now()
        wait_for(
            lambda: len(server.requests) >= 4 and LoopRun.objects.filter(loop_id=loop.loop_id).count() >= 6,
            timeout=40,
            interval=0.2,
            message="webhook attempts and six deliveries",
        )
        delivered = LoopRun.objects.filter(loop_id=loop.loop_id, scheduled_at__gte=started + timedelta(seconds=1))
        assert delivered.count() >= 4
        for run in delivered.exclude(status__in=[RunStatus.CLAIMED, RunStatus.DELIVERING]):
            assert run.status == RunStatus.DELIVERED, (run.status, run.error)
            # On its grid, as every process test holds its loops (tests/scheduler/test_delivery_isolation.py).
            assert (run.finished_at - run.scheduled_at).total_seconds() < 3
        output = scheduler.output()
        assert "failure webhook" in output and SECRET not in output and TOKEN_IN_PATH not in output
    finally:
        schedulers.close()
