"""What delivering a run needs before the host is called: its prompt, its target resolved and
awake, and the message to deliver, or the outcome already known (a deleted loop, a target gone, a
host that failed). Shared by the delivery of claimed runs (scheduler.delivery) and by a claim that
delivers on the embedded host in its own transaction (scheduler.claims)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from django.db import DatabaseError

from core.errors import database_unavailable, one_line, transaction_rolled_back
from loops.models import LoopRun, revision_prompts
from loops.runs import WAITING_FOR_HOST
from scheduler.message import loop_message, message_summary, run_source
from scheduler.rows import DeliveryLoop, RunRow
from scheduler.targets import BatchView, PermanentFailure, resolve_target
from sessions_app.hosts.base import Host, HostError, Message
from sessions_app.models import ReservedTarget

logger = logging.getLogger("dshloop.delivery")

MAX_ATTEMPTS = 6


@dataclass
class Attempt:
    """How one delivery attempt of a run went (not the turn's outcome, which the host reports later)."""

    run: RunRow
    delivered: bool = False
    error: str = ""
    retry: bool = False  # transient: back to claimed, due again after a backoff


class NotAsExpected(Exception):
    """The embedded host did not take every message of a batch whose records were written first
    (a delivery's or a claim's own): its savepoint is undone and the careful way taken instead."""


def failure(run: RunRow, *, error: str, transient: bool) -> Attempt:
    if transient and run.attempt < MAX_ATTEMPTS:
        return Attempt(run, error=error, retry=True)
    return Attempt(run, error=error + (f" (gave up after {run.attempt} attempts)" if transient else ""))


def host_failed(run: RunRow, exc: HostError) -> Attempt:
    """A run's attempt that a host call failed. A host that gave no answer at all cannot say
    whether an earlier attempt got through (DSH may hold the message, sent just before it went
    away): the run is retried with the backoff for as long as it takes, never given up, and the
    host's own exactly-once check decides once it answers (DSH reads the session's history before
    it sends, docs/dsh.md; an HTTP host honours the occurrence key)."""
    if exc.unreachable:
        return Attempt(run, error=WAITING_FOR_HOST + str(exc), retry=True)
    if exc.transient and run.error.startswith(WAITING_FOR_HOST):
        # The host's first answer after an outage (DSH still starting, say) is not yet its word on
        # this run: one more attempt, whatever the count, before the usual rule gives up.
        return Attempt(run, error=str(exc), retry=True)
    return failure(run, error=str(exc), transient=exc.transient)


def _prompts(runs: list[RunRow], loops: dict[str, DeliveryLoop]) -> dict[str, str]:
    """Each run's prompt, by run ID: its revision's. The loop row the batch read already holds it
    while the loop is still at that revision (nearly always: no extra read on the hot path); a run
    claimed before an edit reads its revision's from LoopPrompt. A deleted loop's run is not
    delivered, so it needs none."""
    prompts, older = {}, {}
    for run in runs:
        loop = loops.get(run.loop_id)
        if loop is None:
            continue
        if loop.revision == run.revision:
            prompts[run.run_id] = loop.prompt
        else:
            older[run.run_id] = (run.loop_id, run.revision)
    if older:
        stored = revision_prompts(set(older.values()))
        prompts.update((run_id, stored.get(pair, "")) for run_id, pair in older.items())
    return prompts


def prepare(run: RunRow, loop: DeliveryLoop | None, host: BatchView, prompt: str) -> Attempt | Message:
    """Resolve and wake one run's target: the message to deliver, or the outcome already known."""
    if run.attempt > MAX_ATTEMPTS and host.capabilities.transactional:
        # Handed out again and again, and every driver died before recording an outcome: a
        # poison occurrence must not keep its loop `running` and be re-driven forever. On the
        # embedded host a crash undid its message with the records, so it was never delivered. A
        # remote host's run is asked of the host instead: a lease that ran out may be a slow driver
        # or one that sent before it died, and the host's answer decides (host_failed), as for
        # every attempt past the last (failure: a transient error then gives up).
        return Attempt(
            run, error=f"Its process kept stopping before recording an outcome (gave up after {MAX_ATTEMPTS} attempts)."
        )
    source = run_source(run)
    fresh = (run.target or (loop.session_id if loop else "")) == ReservedTarget.NEW
    try:
        if loop is None:
            raise PermanentFailure("The loop was deleted before this occurrence was delivered.")
        target = resolve_target(host, loop, run, source)
        run.target_session_id, run.fallback = target.session_id, target.fallback or run.fallback
        if fresh and not host.capabilities.transactional:
            # Remember the new session first: a retry of this occurrence must reuse it.
            LoopRun.objects.filter(run_id=run.run_id).update(
                target_session_id=run.target_session_id, fallback=run.fallback
            )
    except PermanentFailure as exc:
        return Attempt(run, error=str(exc))
    except HostError as exc:
        return host_failed(run, exc)
    except DatabaseError as exc:  # a resume or a fresh session the embedded host could not write
        logger.warning("resolving the target of %s: %s", run.occurrence_key, one_line(exc))
        refusal = refused(exc)
        return failure(run, error=str(refusal), transient=refusal.transient)
    except Exception as exc:
        logger.exception("resolving the target of %s raised", run.occurrence_key)
        return failure(run, error=f"Unexpected error: {exc}", transient=True)
    return Message(
        target.session_id,
        loop_message(loop_id=loop.loop_id, prompt=prompt),
        source,
        run.occurrence_key,
        summary=message_summary(name=loop.name, prompt=prompt),
        fresh=fresh,
    )


def prepare_batch(
    runs: list[RunRow], loops: dict[str, DeliveryLoop], host: Host
) -> list[tuple[RunRow, Attempt | Message]]:
    """Each run with its message to deliver, or the outcome already known."""
    try:
        view = BatchView(
            host,
            {loop.session_id for loop in loops.values()}
            | {run.target for run in runs}
            | {loop.created_by_session_id for loop in loops.values()}
            | {run.target_session_id for run in runs},
        )
    except HostError as exc:
        # The batch's sessions could not be looked up (DSH down, or failing): an attempt of each
        # of its runs that failed so, recorded and retried like any host error, not an exception
        # that leaves them `delivering` until their lease runs out. Each run's log line says why.
        return [(run, host_failed(run, exc)) for run in runs]
    prompts = _prompts(runs, loops)
    return [(run, prepare(run, loops.get(run.loop_id), view, prompts.get(run.run_id, ""))) for run in runs]


def refused(exc: DatabaseError) -> HostError:
    """A write the database refused (a constraint, a trigger) is refused again on a retry: the run
    fails at once, with the database's words. Unless the database could not be reached: then
    nothing of the batch can be recorded either, and it is re-driven; or it broke a deadlock (a
    message delivered alone takes its session's lock out of the batch's order): then it is retried."""
    transient = database_unavailable(exc) or transaction_rolled_back(exc)
    return HostError(f"The database refused this delivery: {one_line(exc)}", transient=transient)
