"""One log line per occurrence: the human text, and the same facts as fields.

Every line says `loop=… scheduled=… outcome=…`; the record also carries them as `occurrence`
(a dict), which `DSHLOOP_LOG_FORMAT=json` writes as top-level keys, so a log pipeline can search
by run, loop or outcome without parsing the text.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Protocol


class OccurrenceRun(Protocol):
    """What the log line names of a run (a row of scheduler.rows): this module stays pure, below the models."""

    loop_id: str
    run_id: str
    occurrence_key: str
    scheduled_at: datetime
    attempt: int
    missed: int
    target_session_id: str


def _iso_ms(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def occurrence_fields(run: OccurrenceRun, outcome: str, *, now: datetime, error: str = "") -> dict[str, object]:
    """The facts of one occurrence's outcome: `run` is a run row (scheduler.rows) with its IDs, key,
    schedule time, attempt and target."""
    fields: dict[str, object] = {
        "loop_id": run.loop_id,
        "run_id": run.run_id,
        "occurrence_key": run.occurrence_key,
        "scheduled_at": _iso_ms(run.scheduled_at),
        "lateness_ms": round((now - run.scheduled_at).total_seconds() * 1000),
        "outcome": outcome,
        "attempt": run.attempt,
        "target": run.target_session_id or None,
        "missed": run.missed,
    }
    if error:
        fields["error"] = error
    return fields


def log_occurrence(
    logger: logging.Logger, level: int, run: OccurrenceRun, outcome: str, *, now: datetime, error: str = ""
) -> None:
    """Log one occurrence: `loop=… scheduled=… outcome=… target=… attempt=… missed=… error=…`."""
    if not logger.isEnabledFor(level):
        return
    logger.log(
        level,
        "loop=%s scheduled=%s outcome=%s target=%s attempt=%d missed=%d%s",
        run.loop_id,
        run.scheduled_at.isoformat(),
        outcome,
        run.target_session_id or "-",
        run.attempt,
        run.missed,
        f" error={error!r}" if error else "",
        extra={"occurrence": occurrence_fields(run, outcome, now=now, error=error)},
    )
