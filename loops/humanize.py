"""Words for people: schedules, durations, countdowns, local times and prompt previews (spec §8.2
"schedule", "next run"), shared by the panel and the admin.

Pure presentation. Nothing here decides *when* a loop fires — that is timing.schedules, used by the
scheduler and by selectors.fire_times; these functions only describe stored values. A cron expression
that does not match one of the common shapes below is shown as-is ("cron 5 4 * * 2-3/2"), never
guessed at.
"""

from __future__ import annotations

import math
import zoneinfo
from datetime import datetime, timedelta

from django.conf import settings

from loops.models import Loop
from timing import schedule_text, schedules

PROMPT_PREVIEW_CHARS = 140

# (seconds, singular, plural) from the largest unit down.
_UNITS = (
    (7 * 86400, "week", "weeks"),
    (86400, "day", "days"),
    (3600, "hour", "hours"),
    (60, "minute", "minutes"),
    (1, "second", "seconds"),
)
_SHORT = ((86400, "d"), (3600, "h"), (60, "min"), (1, "s"))

_DAY_NAMES = ("Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat")
_DAY_PLURALS = ("Sundays", "Mondays", "Tuesdays", "Wednesdays", "Thursdays", "Fridays", "Saturdays")
_MONTH_NAMES = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def _plural(count: int, singular: str, plural: str) -> str:
    return f"{count} {singular if count == 1 else plural}"


def interval_words(seconds: int) -> str:
    """'every …' phrasing of a whole-second interval, in the largest unit that divides it evenly:
    600 -> "10 minutes", 3600 -> "hour", 5400 -> "90 minutes", 90 -> "90 seconds"."""
    for size, singular, plural in _UNITS:
        if seconds % size == 0:
            count = seconds // size
            return singular if count == 1 else f"{count} {plural}"
    raise AssertionError("unreachable: every integer is divisible by 1")


def duration_words(seconds: float) -> str:
    """A rounded span for reading, at most two units: "100 seconds", "5 minutes", "1 hour 30 minutes"."""
    seconds = abs(seconds)
    if seconds < 120:
        return _plural(int(round(seconds)), "second", "seconds")
    if seconds < 3570:
        return _plural(int(round(seconds / 60)), "minute", "minutes")
    if seconds < 86400 - 30:
        hours, minutes = divmod(int(round(seconds / 60)), 60)
        words = _plural(hours, "hour", "hours")
        return f"{words} {_plural(minutes, 'minute', 'minutes')}" if minutes else words
    days, hours = divmod(int(round(seconds / 3600)), 24)
    words = _plural(days, "day", "days")
    return f"{words} {_plural(hours, 'hour', 'hours')}" if hours else words


def wait_span(wait: timedelta) -> str:
    """A wait, never rounded down (a wait just past a whole number of seconds, the misfire grace
    say, reads past it: "5.1 s", not "5 s"): tenths of a second under a minute, short_span above."""
    seconds = wait.total_seconds()
    if seconds >= 60:
        return short_span(math.ceil(seconds))
    tenths = math.ceil(round(seconds * 10, 6))  # round(): 5.1 s held as 5.09999… stays 5.1
    return f"{tenths // 10} s" if tenths % 10 == 0 else f"{tenths / 10:.1f} s"


def fresh_sessions_running(count: int) -> str:
    """contract §14's capacity in words: "1 fresh session was running", "4 fresh sessions were running"."""
    return f"{count} fresh session was running" if count == 1 else f"{count} fresh sessions were running"


def short_span(seconds: float) -> str:
    """Compact span for countdowns (the same format panel.js writes): "4 min 12 s", "2 h 5 min", "3 d 4 h"."""
    seconds = int(abs(seconds))
    if seconds < 60:
        return f"{seconds} s"
    parts: list[tuple[int, str]] = []
    for size, unit in _SHORT:
        if seconds >= size or parts:
            count, seconds = divmod(seconds, size)
            parts.append((count, unit))
            if len(parts) == 2:
                break
    if parts[-1][0] == 0:
        parts.pop()  # "10 min", not "10 min 0 s"
    return " ".join(f"{count} {unit}" for count, unit in parts)


def countdown(moment: datetime | None, now: datetime) -> str:
    """Text a countdown starts with; panel.js keeps it ticking from the element's datetime."""
    if moment is None:
        return "—"
    delta = (moment - now).total_seconds()
    if delta >= 0:
        return f"in {short_span(delta)}"
    if delta > -30:  # spec §4: not overdue until 30 s late, the clock is on it
        return "due now"
    return f"overdue by {short_span(delta)}"


def ago(moment: datetime | None, now: datetime) -> str:
    if moment is None:
        return "never"
    delta = (now - moment).total_seconds()
    if delta < 0:
        return f"in {short_span(delta)}"
    if delta < 10:
        return "just now"
    return f"{short_span(delta)} ago"


def preview(prompt: str, limit: int = PROMPT_PREVIEW_CHARS) -> str:
    """The prompt on one line, cut to `limit` characters with an ellipsis."""
    text = " ".join(prompt.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def loop_zone(loop: Loop) -> str:
    """The zone a loop lives in: its cron tz, else the host's (every/after have no zone of their own)."""
    return getattr(loop.schedule, "tz", None) or settings.TIME_ZONE


def zone(name: str) -> zoneinfo.ZoneInfo:
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return zoneinfo.ZoneInfo("UTC")


def local_time(moment: datetime, zone_name: str, *, now: datetime | None = None) -> str:
    """'Mon 2 Jun 09:30 CST' in the given zone; the year only when it is not the current one."""
    local = moment.astimezone(zone(zone_name))
    text = f"{_DAY_NAMES[(local.weekday() + 1) % 7]} {local.day} {_MONTH_NAMES[local.month - 1]}"
    if now is None or local.year != now.astimezone(zone(zone_name)).year:
        text += f" {local.year}"
    return f"{text} {local:%H:%M} {local.tzname()}"


def full_local_time(moment: datetime, zone_name: str) -> str:
    """Unambiguous, with the offset, so DST changes are visible: '2025-03-30 03:30 CEST (UTC+02:00)'."""
    local = moment.astimezone(zone(zone_name))
    offset = local.strftime("%z")
    return f"{local:%Y-%m-%d %H:%M:%S} {local.tzname()} (UTC{offset[:3]}:{offset[3:]})"


# --- cron ---------------------------------------------------------------------------------------


def _numbers(field: str, low: int, high: int, names: tuple[str, ...] = ()) -> list[int] | None:
    """Values of a plain cron field (numbers, names, ranges, lists, steps over a range); None for '*'
    or anything unusual."""
    if field == "*":
        return None
    values: set[int] = set()

    def value(token: str) -> int:
        if token.isdigit():
            return int(token)
        upper = token[:3].upper()
        for index, name in enumerate(names):
            if name.upper() == upper and len(token) == 3:
                return index + (1 if low == 1 else 0)
        raise ValueError(token)

    for part in field.split(","):
        base, _, step_text = part.partition("/")
        step = int(step_text) if step_text else 1
        if step < 1:
            raise ValueError(part)
        if base == "*":
            start, stop = low, high
        elif "-" in base:
            first, last = base.split("-", 1)
            start, stop = value(first), value(last)
        else:
            start = value(base)
            stop = high if step_text else start
        if not (low <= start <= high and low <= stop <= high) or start > stop:
            raise ValueError(part)
        values.update(range(start, stop + 1, step))
    return sorted(values)


def _times(minutes: list[int], hours: list[int]) -> str:
    times = [f"{h:02d}:{m:02d}" for h in hours for m in minutes]
    if len(times) > 4:
        raise ValueError("too many times to list")
    return times[0] if len(times) == 1 else ", ".join(times[:-1]) + " and " + times[-1]


def _days_of_week(days: list[int]) -> str:
    days = sorted({day % 7 for day in days})  # 7 is Sunday too
    if days == [1, 2, 3, 4, 5]:
        return "on weekdays"
    if days == [0, 6]:
        return "on weekends"
    if len(days) == 7:
        return "every day"
    if len(days) == 1:
        return f"on {_DAY_PLURALS[days[0]]}"
    return "on " + ", ".join(_DAY_NAMES[day] for day in days)


def _ordinal_days(days: list[int]) -> str:
    return ", ".join(str(day) for day in days)


def cron_words(expr: str) -> str | None:
    """Common cron shapes in words (no zone); None when the expression is better shown raw."""
    expr = schedule_text.CRON_MACROS.get(expr.strip().lower(), expr)
    fields = expr.split()
    if len(fields) != 5:
        return None
    minute, hour, dom, month, dow = fields
    try:
        if (hour, dom, month, dow) == ("*", "*", "*", "*"):
            if minute == "*":
                return "every minute"
            if minute.startswith("*/") and minute[2:].isdigit() and 60 % int(minute[2:]) == 0:
                # Only a step that divides the hour is a true interval ("*/45" is :00 and :45).
                return f"every {interval_words(int(minute[2:]) * 60)}"
            minutes = _numbers(minute, 0, 59)
            if minutes and len(minutes) <= 4:
                return "every hour at " + ", ".join(f":{m:02d}" for m in minutes)
            return None
        minutes = _numbers(minute, 0, 59)
        if not minutes or len(minutes) > 4:
            return None
        if (
            hour.startswith("*/")
            and hour[2:].isdigit()
            and 24 % int(hour[2:]) == 0
            and (dom, month, dow) == ("*", "*", "*")
        ):
            step = int(hour[2:])
            at = ", ".join(f":{m:02d}" for m in minutes)
            return f"every {interval_words(step * 3600)} at {at}"
        hours = _numbers(hour, 0, 23)
        if not hours:
            return None
        at = _times(minutes, hours)
        days_of_month = _numbers(dom, 1, 31)
        months = _numbers(month, 1, 12, _MONTH_NAMES)
        days_of_week = _numbers(dow, 0, 7, _DAY_NAMES)
        if days_of_month is not None and days_of_week is not None:
            return None  # cron ORs the two day fields: too subtle for a phrase, show the raw expression
        if days_of_month is not None:
            days = f"on day {_ordinal_days(days_of_month)}"
        elif days_of_week is not None:
            days = _days_of_week(days_of_week)
        else:
            days = "every day"
        if months is None:
            if days_of_month is not None:
                days += " of every month"
            return f"{at} {days}"
        month_names = ", ".join(_MONTH_NAMES[m - 1] for m in months)
        if days_of_month is not None:
            return f"{at} on {_ordinal_days(days_of_month)} {month_names}"
        return f"{at} {days} in {month_names}"
    except ValueError:
        return None


def schedule_words(loop: Loop, *, now: datetime, host_tz: str) -> tuple[str, str]:
    """(words, exact form for a title attribute) of a loop's schedule (spec §8.2 "schedule")."""
    match loop.schedule:
        case schedules.Every(every_seconds=seconds):
            return f"every {interval_words(seconds)}", f"every_seconds: {seconds}"
        case schedules.After(after_seconds=seconds):
            exact = f"after_seconds: {seconds} (after creation)"
            if loop.next_at is not None and loop.next_at > now and loop.next_at - now <= timedelta(days=1):
                return f"once, in {duration_words((loop.next_at - now).total_seconds())}", exact
            moment = loop.next_at or loop.last_run_at
            if moment is None:
                return f"once, {duration_words(seconds)} after creation", exact
            return f"once, at {local_time(moment, host_tz, now=now)}", exact
        case schedules.Cron(expr=expr, tz=tz):
            zone_name = tz or host_tz
            words = cron_words(expr)
            where = zone_name if tz else f"{zone_name} (host time zone)"
            exact = f"cron {expr} in {where}"
            if words is None:
                return f"cron {expr}, {zone_name}", exact
            return f"{words}, {zone_name}", exact
    raise AssertionError(f"unknown schedule {loop.schedule!r}")
