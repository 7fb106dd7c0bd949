"""The delivered text of one occurrence (spec §6) and its machine-readable source."""

from __future__ import annotations

from datetime import UTC, datetime
from html import escape as _escape_markup
from typing import Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

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


# A fresh session's title: the loop's words kept short enough for a sidebar row beside the time.
TITLE_HEAD = 40
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def fresh_session_title(*, name: str, prompt: str, scheduled_at: datetime, tz: str) -> str:
    """What the session made for one occurrence of a `new` loop is called where a person picks it
    (DSH Web's sidebar, the panels' session pickers): which loop (its name, else its prompt's first
    words) and which occurrence (its scheduled time, in the loop's zone; a loop without one runs
    in UTC, said so): "Nightly triage · 7 Dec 09:30". Months in English whatever the locale."""
    head = message_summary(name=name, prompt=prompt)
    if len(head) > TITLE_HEAD:
        head = head[: TITLE_HEAD - 1].rstrip() + "…"
    try:
        zone = ZoneInfo(tz) if tz else None
    except (ZoneInfoNotFoundError, ValueError):  # validated when the loop was made; gone since
        zone = None
    local = scheduled_at.astimezone(zone or UTC)
    when = f"{local.day} {_MONTHS[local.month - 1]} {local:%H:%M}" + ("" if zone else " UTC")
    return f"{head} · {when}" if head else when


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
