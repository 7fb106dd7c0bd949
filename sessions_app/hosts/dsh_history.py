"""A DSH session's log read back through `session.history`, for the `dsh` host: where an occurrence's
message is (exactly once), and the events a turn's outcome is read from. A cold session is read
without resuming it. Each page is a call on DSH's one thread, which serves an attached session from
its in-memory log and a cold one from its file: this is the careful path (a delivery without dshloop's
plugin, or with a plugin too old to confirm its own deliveries; a turn's outcome), not a delivery's
hot path, which the plugin answers from DSH's memory (dsh-plugin/src/deliver.ts)."""

from __future__ import annotations

import logging

from .base import RunRef, TurnEnd
from .dsh_turns import carries, stall_of, turn_end_of
from .dsh_wire import DshClient, DshError, json_array, json_object

logger = logging.getLogger("dshloop.hosts")

HISTORY_PAGE = 200  # messages per history page when looking for an occurrence's message
# DSH's event times and dshloop's run times come from two clocks (one machine: DSH answers only
# loopback); a log is read back this much further than a run's time.
CLOCK_MARGIN_MS = 10 * 60 * 1000


def events_since(wire: DshClient, session_id: str, since_ms: int) -> list[dict]:
    """The session's log events from about `since_ms` on, oldest first: history pages are read
    from the tail back until they reach that time."""
    events: list[dict] = []
    before = None
    while True:
        payload = {"sessionId": session_id, "maxMessages": HISTORY_PAGE}
        if before is not None:
            payload["beforeSeq"] = before
        value = wire.call("session.history", payload)
        page = value.get("events") if isinstance(value, dict) else None
        if not isinstance(page, list):
            raise DshError("DSH sent no events for session.history.", transient=True)
        page = [entry["event"] for entry in page if isinstance(entry, dict) and isinstance(entry.get("event"), dict)]
        page = [event for event in page if isinstance(event.get("seq"), int)]
        events = page + events
        times = [event["time"] for event in page if isinstance(event.get("time"), int)]
        if not value.get("hasMore") or not page or (times and min(times) < since_ms):
            return sorted(events, key=lambda event: event["seq"])
        before = min(event["seq"] for event in page)


def find_occurrence(wire: DshClient, session_id: str, source: dict) -> tuple[str, str | None]:
    """Where the occurrence's message is in DSH: ("delivered", its message ID) once a
    `user/message` carries its key; ("pending", None) while DSH still holds it in the session's
    inbox (accepted, waiting for a turn or a step); ("absent", None) if it was never sent, or DSH
    dropped it (a prompt still queued when DSH stops is cancelled). The plugin applies the same
    rules to the live agent (dsh-plugin/src/deliver.ts `whereIs`)."""
    key = source["occurrence_key"]
    # A message for this occurrence cannot predate its scheduled time; a margin covers clock skew.
    events = events_since(wire, session_id, int(source.get("scheduled_at") or 0) - CLOCK_MARGIN_MS)
    queued_on = None  # the inbox target of the splice that queued it
    for event in events:
        data = json_object(event.get("data"))
        if event.get("type") == "user/message":
            if carries(data.get("source"), key):
                return "delivered", str(data.get("id") or event["seq"])
        elif event.get("type") == "agent/inbox/spliced":
            inserted = json_array(data.get("inserted"))
            if any(carries(json_object(item).get("source"), key) for item in inserted):
                queued_on = data.get("target")
            elif queued_on is not None and data.get("target") == queued_on and data.get("outcome") == "canceled":
                queued_on = None  # DSH stopped with it still queued: lost (DSH-HOST.md §6.5)
    return ("pending", None) if queued_on is not None else ("absent", None)


def turn_outcomes(wire: DshClient, runs: list[RunRef]) -> dict[str, TurnEnd]:
    """(base.TurnOutcomes) How each run's turn ended, from its session's log: one history read per
    session, back to its oldest run's delivery. Runs whose turn has not ended, whose message is not in
    the log, or whose session DSH no longer has are left out. DSH unreachable -> DshError (transient)."""
    by_session: dict[str, list[RunRef]] = {}
    for run in runs:
        by_session.setdefault(run.session_id, []).append(run)
    outcomes: dict[str, TurnEnd] = {}
    for session_id, session_runs in by_session.items():
        since = min(run.delivered_at_ms for run in session_runs) - CLOCK_MARGIN_MS
        try:
            events = events_since(wire, session_id, since)
        except DshError as exc:
            if exc.transient:
                raise
            if exc.code != "session-not-found":  # one session's permanent error spares the others
                logger.warning("turn outcomes of session %s not read: %s", session_id, exc)
            continue
        for run in session_runs:
            ended = turn_end_of(events, run.occurrence_key)
            if ended is None and run.fresh:
                ended = stall_of(events, run.occurrence_key)
            if ended is not None:
                outcomes[run.run_id] = ended
    return outcomes
