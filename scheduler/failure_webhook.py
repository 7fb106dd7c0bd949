"""The operators' failure webhook (contract §16): each failure episode, POSTed as signed JSON.

`{"event": "loop_auto_paused"|"run_failed", "loop_id", "run_id", "error", "consecutive_failures",
"at"}` (`at`: epoch ms of the failure) to DSHLOOP_FAILURE_WEBHOOK_URL, with
`X-Dshloop-Signature: sha256=<hex HMAC-SHA256 of the body under DSHLOOP_FAILURE_WEBHOOK_SECRET>`
and `X-Dshloop-Event-Id: <the episode's key>` (the same on every retry: a receiver drops repeats).

Sent from the episode's row (scheduler.episodes) by a thread of `runloops` of its own, so that a
slow or failing receiver never delays a claim, a delivery or a notice. An event is leased while
it is posted (webhook_due_at pushed past the POST's timeout), as notices are. A 2xx answer is
taken; anything else (an error, a timeout, another status) is retried with backoff (1 s doubling
to 60 s, at the thread's next look) until DSHLOOP_FAILURE_WEBHOOK_RETRY_SECONDS after the failure, then given up. Every
failed attempt and every event given up is logged and counted (GET /metrics). The log names the
receiver by its origin only, since webhook URLs often carry a token in their path; the secret is
never logged.

At least once: a scheduler killed after the POST and before its record posts the event again.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from urllib.parse import urlsplit

import httpx
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from core.backoff import doubling
from core.errors import one_line
from core.timeutil import to_ms
from loops.counters import WEBHOOK_ATTEMPT_FAILED, Tally
from loops.models import FailureEpisode, WebhookStatus
from scheduler.episodes import lease_pending

logger = logging.getLogger("dshloop.webhook")

BACKOFF_BASE = timedelta(seconds=1)
BACKOFF_CAP = timedelta(seconds=60)
SIGNATURE_HEADER = "X-Dshloop-Signature"
EVENT_ID_HEADER = "X-Dshloop-Event-Id"


def webhook_backoff(attempt: int) -> timedelta:
    """1 s, 2 s, 4 s … after failed attempt 1, 2, 3 …, at most a minute."""
    return doubling(attempt, base=BACKOFF_BASE, cap=BACKOFF_CAP)


def event_body(episode: FailureEpisode) -> bytes:
    """The JSON body: the bytes that are signed are the bytes that are sent."""
    event = {
        "event": episode.event,
        "loop_id": episode.loop_id,
        "run_id": episode.run_id,
        "error": episode.error,
        "consecutive_failures": episode.consecutive_failures,
        "at": to_ms(episode.at),
    }
    return json.dumps(event, ensure_ascii=False, separators=(",", ":")).encode()


def signature(body: bytes, secret: str) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def receiver() -> str:
    """The webhook's origin, for the log: never its path or query (a token may be there)."""
    parts = urlsplit(settings.DSHLOOP_FAILURE_WEBHOOK_URL)
    return f"{parts.scheme}://{parts.hostname or ''}{f':{parts.port}' if parts.port else ''}"


@dataclass
class Posted:
    episode: FailureEpisode
    error: str = ""  # "" when the receiver took it


def post_event(client: httpx.Client, episode: FailureEpisode) -> Posted:
    body = event_body(episode)
    headers = {
        "Content-Type": "application/json",
        SIGNATURE_HEADER: signature(body, settings.DSHLOOP_FAILURE_WEBHOOK_SECRET),
        EVENT_ID_HEADER: episode.key,
    }
    try:
        response = client.post(settings.DSHLOOP_FAILURE_WEBHOOK_URL, content=body, headers=headers)
    except httpx.HTTPError as exc:
        return Posted(episode, f"{type(exc).__name__}: {one_line(exc) or 'no answer'}")
    except Exception as exc:  # noqa: BLE001 - recorded as a failed attempt, so it is retried and given up in time
        logger.error("posting the failure event %s raised %s", episode.key, type(exc).__name__)
        return Posted(episode, f"Unexpected error: {type(exc).__name__}")
    if not response.is_success:
        return Posted(episode, f"HTTP {response.status_code}")
    return Posted(episode)


def _lease() -> timedelta:
    """Past one POST's timeout (and its connect), so that no other scheduler posts it meanwhile."""
    return timedelta(seconds=2 * settings.DSHLOOP_FAILURE_WEBHOOK_TIMEOUT_SECONDS + 5)


def _take(now: datetime, limit: int) -> list[FailureEpisode]:
    return lease_pending("webhook", pending=WebhookStatus.PENDING, now=now, until=now + _lease(), limit=limit)


def _record(posted: list[Posted], now: datetime) -> None:
    tally = Tally()
    give_up_after = timedelta(seconds=settings.DSHLOOP_FAILURE_WEBHOOK_RETRY_SECONDS)
    with transaction.atomic(durable=True):
        for result in posted:
            episode = result.episode
            if not result.error:
                status, due = WebhookStatus.SENT, None
            else:
                retry_at = now + webhook_backoff(episode.webhook_attempts)
                gives_up = retry_at > episode.at + give_up_after
                status, due = (WebhookStatus.FAILED, None) if gives_up else (WebhookStatus.PENDING, retry_at)
            ours = FailureEpisode.objects.filter(
                key=episode.key, webhook_status=WebhookStatus.PENDING, webhook_due_at=episode.webhook_due_at
            )
            if not ours.update(webhook_status=status, webhook_due_at=due, webhook_error=result.error):
                continue
            if status == WebhookStatus.SENT:
                logger.info(
                    "failure webhook loop=%s run=%s event=%s sent", episode.loop_id, episode.run_id, episode.event
                )
                tally.webhook(WebhookStatus.SENT)
                continue
            tally.webhook(WEBHOOK_ATTEMPT_FAILED)
            logger.warning(
                "failure webhook loop=%s run=%s event=%s to %s: attempt %d failed (%s); %s",
                episode.loop_id,
                episode.run_id,
                episode.event,
                receiver(),
                episode.webhook_attempts,
                result.error,
                "given up" if status == WebhookStatus.FAILED else f"retrying at {due.isoformat() if due else ''}",
            )
            if status == WebhookStatus.FAILED:
                tally.webhook(WebhookStatus.FAILED)
        tally.save()


class WebhookSender:
    """The webhook thread's job (scheduler.housekeeping): one event per step, one HTTP client."""

    def __init__(self) -> None:
        self.client = httpx.Client(timeout=settings.DSHLOOP_FAILURE_WEBHOOK_TIMEOUT_SECONDS, follow_redirects=False)

    def step(self, *, limit: int = 1) -> bool:
        """Post the due events (one by default: a slow receiver holds the thread one timeout at a
        time); True while more may be due."""
        taken = _take(timezone.now(), limit)
        if not taken:
            return False
        posted = [post_event(self.client, episode) for episode in taken]
        _record(posted, timezone.now())
        return len(taken) >= limit
