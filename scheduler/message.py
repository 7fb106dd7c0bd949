"""The delivered text of one occurrence (spec §6) and its machine-readable source."""

from __future__ import annotations

from datetime import datetime
from html import escape as _escape_markup
from typing import Protocol

from core.timeutil import to_ms


class SourceRun(Protocol):
    """What the source names of a run (a LoopRun): this module stays pure, below the models."""

    loop_id: str
    run_id: str
    occurrence_key: str
    scheduled_at: datetime


def _escape(text: str) -> str:
    """Character data for an XML element: &, < and > as entities, as xml.sax.saxutils.escape does
    (html.escape without quotes: the same three, & first; Django has imported html already, while
    saxutils pulls in xml.sax and urllib.request, memory in each process that delivers).
    And CR as a character reference: XML parsers turn a raw CR into LF, a reference survives, so
    parsing the message gives back the prompt byte for byte."""
    return _escape_markup(text, quote=False).replace("\r", "&#13;")


def loop_message(*, loop_id: str, prompt: str) -> str:
    return f"<loop>\n  <loop_id>{_escape(loop_id)}</loop_id>\n  <prompt>{_escape(prompt)}</prompt>\n</loop>"


# DSH shows at most this much of a plugin message's summary (contract §15).
SUMMARY_LIMIT = 120


def message_summary(*, name: str, prompt: str) -> str:
    """The one line a host may show for the message instead of its XML: the loop's name, else its
    prompt's first words (on one line, cut with an ellipsis)."""
    # Only the head of a long prompt is looked at: a summary is computed for every occurrence.
    text = " ".join((name or prompt[: SUMMARY_LIMIT * 4]).split())
    return text if len(text) <= SUMMARY_LIMIT else text[: SUMMARY_LIMIT - 1].rstrip() + "…"


# The `source` a delivery hands its host with the message (contract §5): what sent it.
Source = dict[str, str | int]


def run_source(run: SourceRun) -> Source:
    return {
        "kind": "loop",
        "loop_id": run.loop_id,
        "run_id": run.run_id,
        "occurrence_key": run.occurrence_key,
        "scheduled_at": to_ms(run.scheduled_at),
    }
