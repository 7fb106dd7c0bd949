"""What a user writes for a schedule: the error for one that is unusable, and the text of a cron
expression (a macro or five fields; no H or R, which differ per process; no range that runs
backwards). Pure, as timing.schedules, which computes with what this accepts."""

from __future__ import annotations

import re
from datetime import datetime

from croniter import CroniterError, croniter

# croniter's macros, each with the five fields it stands for.
CRON_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_FIELDS = "minute hour day-of-month month day-of-week"
# croniter's H (hashed) and R (random) values differ per process, so two workers would disagree on
# the next deadline. Letters inside names (MAR, THU, FRI) are not matched.
_HASHED_OR_RANDOM = re.compile(r"(?<![a-z])[hr](?![a-z])", re.IGNORECASE)


class ScheduleError(ValueError):
    """A schedule a user supplied is unusable.

    code is one of "invalid_cron", "invalid_time_zone", "no_future_occurrence"; field is the dotted
    path of the offending input ("schedule.expr", "schedule.tz"); message is one actionable sentence.
    """

    def __init__(self, code: str, message: str, field: str):
        super().__init__(message)
        self.code, self.message, self.field = code, message, field


def _invalid_cron(message: str) -> ScheduleError:
    return ScheduleError("invalid_cron", message, "schedule.expr")


_FIELD_NAMES = _FIELDS.split()
_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_WEEKDAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
_VALUE_NAMES = {
    "month": {name: i + 1 for i, name in enumerate(_MONTHS)},
    "day-of-week": {name: i for i, name in enumerate(_WEEKDAYS)},
}


def _field_value(field: str, text: str) -> int | None:
    """A range end as a number (a name is its number); None for what is not one (e.g. L)."""
    if text.isdigit():
        return int(text)
    return _VALUE_NAMES.get(field, {}).get(text.lower())


def refuse_reversed_ranges(fields: list[str]) -> None:
    # croniter reads "5-1" as a range that wraps around (5..59 and 0..1); standard cron refuses it,
    # and a user who wrote it more likely swapped the ends than meant the wrap: say so (spec §9).
    # A macro (one field) has no ranges.
    for field, text in zip(_FIELD_NAMES, fields if len(fields) == len(_FIELD_NAMES) else [], strict=False):
        for item in text.split(","):
            span = item.split("/", 1)[0]
            if "-" not in span:
                continue
            start, end = span.split("-", 1)
            low, high = _field_value(field, start), _field_value(field, end)
            if low is not None and high is not None and low > high:
                raise _invalid_cron(
                    f"Cron {field} range {span!r} runs backwards: write it low-high ('{end}-{start}'), "
                    "or list the two parts of a range that wraps around, separated by a comma."
                )


def normalize_cron(expr: str) -> str:
    if not isinstance(expr, str):
        raise _invalid_cron(f"Cron expression must be a string, got {type(expr).__name__}.")
    fields = expr.split()
    if len(fields) == 1 and fields[0].startswith("@"):
        macro = fields[0].lower()
        if macro not in CRON_MACROS:
            raise _invalid_cron(f"Unknown cron macro {fields[0]!r}: use one of {', '.join(CRON_MACROS)}.")
        return macro
    if len(fields) in (6, 7):
        raise _invalid_cron(
            f"Cron expression has {len(fields)} fields, but seconds and years are not supported: "
            f"use exactly 5 fields ({_FIELDS})."
        )
    if len(fields) != 5:
        raise _invalid_cron(f"Cron expression has {len(fields)} fields: use 5 ({_FIELDS}) or a macro such as @daily.")
    if any(_HASHED_OR_RANDOM.search(field) for field in fields):
        raise _invalid_cron("Cron values H (hashed) and R (random) are not supported: use explicit numbers.")
    normalized = " ".join(fields)
    try:
        croniter(normalized, datetime(2000, 1, 1))
    except (CroniterError, TypeError) as exc:  # CroniterBadTypeRangeError is a TypeError
        raise _invalid_cron(
            f"Cron expression {normalized!r} is not valid ({exc}); fields are minute 0-59, "
            "hour 0-23, day-of-month 1-31, month 1-12, day-of-week 0-7."
        ) from exc
    return normalized
