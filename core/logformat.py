"""`DSHLOOP_LOG_FORMAT=json`: one JSON object per log line, for a log pipeline to search.

Every record becomes `{"time", "level", "logger", "message"}`, plus `"exception"` when it carries
one; an occurrence's record (loops.occurrence_log) adds its `occurrence` fields as top-level keys.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime


def _utc_ms(epoch_seconds: float) -> str:
    """e.g. 2026-12-01T10:00:00.000Z: the form of an occurrence's scheduled_at, so the two compare."""
    moment = datetime.fromtimestamp(epoch_seconds, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class UncaughtOnly(logging.Filter):
    """For django.request: only the records of exceptions Django caught (they carry exc_info, and so
    their traceback). Django also logs every 4xx and 5xx response a view chose to send; those are
    answers, not failures (the 503 of /api/health while no scheduler runs, a 404), and the code that
    chose them logs what matters."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.exc_info is not None


class JsonFormatter(logging.Formatter):
    """One line of JSON per record. json.dumps escapes newlines (a traceback, a prompt in an error)
    inside strings, so a record is never split across lines; ASCII-only output (its default) is
    valid whatever encoding the stream has."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": _utc_ms(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)  # cached on the record, as logging does
        if record.exc_text:
            entry["exception"] = record.exc_text
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        occurrence = getattr(record, "occurrence", None)
        if isinstance(occurrence, dict):
            # The envelope wins a clash: "time" and "message" always mean the record's own, whatever a
            # caller passes in `extra` (an occurrence's own keys never clash with them).
            for key, value in occurrence.items():
                entry.setdefault(str(key), value)
        # default=str: a value json cannot write (a datetime, a UUID, an exception) is written as its
        # text rather than losing the whole line to a TypeError inside logging.
        return json.dumps(entry, default=str)
