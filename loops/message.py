"""The delivered text of one occurrence (spec §6) and its machine-readable source."""

from __future__ import annotations

from datetime import datetime
from typing import Protocol
from xml.sax.saxutils import escape

from dshloop.timeutil import to_ms


class RunRef(Protocol):
    """What the source names of a run (a LoopRun): this module stays pure, below the models."""

    loop_id: str
    run_id: str
    occurrence_key: str
    scheduled_at: datetime


# XML parsers turn a raw CR into LF; a character reference survives, so parsing the message
# gives back the prompt byte for byte.
_ENTITIES = {"\r": "&#13;"}


def loop_message(*, loop_id: str, prompt: str) -> str:
    return (
        "<loop>\n"
        f"  <loop_id>{escape(loop_id, _ENTITIES)}</loop_id>\n"
        f"  <prompt>{escape(prompt, _ENTITIES)}</prompt>\n"
        "</loop>"
    )


def run_source(run: RunRef) -> dict:
    return {
        "kind": "loop",
        "loop_id": run.loop_id,
        "run_id": run.run_id,
        "occurrence_key": run.occurrence_key,
        "scheduled_at": to_ms(run.scheduled_at),
    }
