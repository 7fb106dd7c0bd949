"""Schedules, spans, times and previews in words (loops/humanize.py): pure, no database."""

from datetime import UTC, datetime, timedelta

import pytest

from loops import humanize
from loops.models import Loop

NOW = datetime(2025, 6, 2, 10, 0, tzinfo=UTC)  # a Monday


@pytest.mark.parametrize(
    ("seconds", "words"),
    [
        (1, "second"),
        (45, "45 seconds"),
        (60, "minute"),
        (600, "10 minutes"),
        (5400, "90 minutes"),
        (3600, "hour"),
        (7200, "2 hours"),
        (86400, "day"),
        (604800, "week"),
        (86401, "86401 seconds"),
    ],
)
def test_interval_words_use_the_largest_unit_that_divides_exactly(seconds, words):
    assert humanize.interval_words(seconds) == words


@pytest.mark.parametrize(
    ("expr", "words"),
    [
        ("30 9 * * 1-5", "09:30 on weekdays"),
        ("0 0 * * 0,6", "00:00 on weekends"),
        ("0 9 * * MON,WED,FRI", "09:00 on Mon, Wed, Fri"),
        ("0 12 * * 7", "12:00 on Sundays"),
        ("*/15 * * * *", "every 15 minutes"),
        ("* * * * *", "every minute"),
        ("0 */2 * * *", "every 2 hours at :00"),
        ("0 9,17 * * *", "09:00 and 17:00 every day"),
        ("0 9 1 * *", "09:00 on day 1 of every month"),
        ("0 9 1 1 *", "09:00 on 1 Jan"),
        ("@daily", "00:00 every day"),
        ("@hourly", "every hour at :00"),
        ("@weekly", "00:00 on Sundays"),
    ],
)
def test_common_cron_shapes_read_as_words(expr, words):
    assert humanize.cron_words(expr) == words


@pytest.mark.parametrize(
    "expr",
    [
        "0 9 1 * 1",  # day-of-month OR day-of-week: too subtle for a phrase
        "*/7 * * * 1",
        "1,2,3,4,5 9 * * *",  # more than four times a day
    ],
)
def test_unusual_cron_is_shown_raw_rather_than_guessed(expr):
    assert humanize.cron_words(expr) is None


def test_a_minute_step_that_does_not_divide_the_hour_is_not_called_an_interval():
    # "*/45" fires at :00 and :45, 15 minutes apart once an hour: not "every 45 minutes".
    assert humanize.cron_words("*/45 * * * *") == "every hour at :00, :45"


def loop(**fields):
    defaults = {
        "kind": "every",
        "every_seconds": None,
        "after_seconds": None,
        "cron_expr": "",
        "tz": "",
        "next_at": None,
        "last_run_at": None,
    }
    return Loop(**{**defaults, **fields})  # unsaved: schedule_words reads no database


def test_schedule_words_every():
    assert humanize.schedule_words(loop(every_seconds=600), now=NOW, host_tz="UTC") == (
        "every 10 minutes",
        "every_seconds: 600",
    )


def test_schedule_words_after_counts_down_while_pending_then_names_the_time():
    pending = loop(kind="after", after_seconds=300, next_at=NOW + timedelta(seconds=299.6))
    assert humanize.schedule_words(pending, now=NOW, host_tz="UTC")[0] == "once, in 5 minutes"
    far = loop(kind="after", after_seconds=3 * 86400, next_at=NOW + timedelta(days=3))
    assert humanize.schedule_words(far, now=NOW, host_tz="Asia/Shanghai")[0] == "once, at Thu 5 Jun 18:00 CST"
    done = loop(kind="after", after_seconds=60, last_run_at=NOW - timedelta(hours=1))
    assert humanize.schedule_words(done, now=NOW, host_tz="UTC")[0] == "once, at Mon 2 Jun 09:00 UTC"


def test_schedule_words_cron_names_its_zone_and_keeps_the_raw_expression():
    words, exact = humanize.schedule_words(
        loop(kind="cron", cron_expr="30 9 * * 1-5", tz="Asia/Shanghai"), now=NOW, host_tz="UTC"
    )
    assert words == "09:30 on weekdays, Asia/Shanghai"
    assert exact == "cron 30 9 * * 1-5 in Asia/Shanghai"
    words, exact = humanize.schedule_words(loop(kind="cron", cron_expr="5 4 * * 2-3/2,6"), now=NOW, host_tz="UTC")
    assert words == "04:05 on Tue, Sat, UTC"
    assert exact == "cron 5 4 * * 2-3/2,6 in UTC (host time zone)"


def test_schedule_words_raw_cron_when_no_phrase_fits():
    words, _ = humanize.schedule_words(loop(kind="cron", cron_expr="0 9 1 * 1", tz="UTC"), now=NOW, host_tz="UTC")
    assert words == "cron 0 9 1 * 1, UTC"


@pytest.mark.parametrize(
    ("delta", "text"),
    [
        (timedelta(minutes=10), "in 10 min"),
        (timedelta(minutes=9, seconds=59), "in 9 min 59 s"),
        (timedelta(hours=26, minutes=5), "in 1 d 2 h"),
        (timedelta(seconds=-10), "due now"),  # spec §4: not overdue until 30 s late
        (timedelta(minutes=-2), "overdue by 2 min"),
    ],
)
def test_countdown(delta, text):
    assert humanize.countdown(NOW + delta, NOW) == text


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0.0, "0 s"), (5.0, "5 s"), (5.001, "5.1 s"), (5.1, "5.1 s"), (5.95, "6 s"), (59.99, "60 s"), (60.2, "1 min 1 s")],
)
def test_a_wait_is_never_shown_shorter_than_it_was(seconds, text):
    assert humanize.wait_span(timedelta(seconds=seconds)) == text


def test_local_time_in_the_loops_zone_shows_the_dst_offset():
    summer = datetime(2025, 3, 30, 1, 30, tzinfo=UTC)  # 03:30 CEST, just after spring-forward
    assert humanize.local_time(summer, "Europe/Berlin", now=summer) == "Sun 30 Mar 03:30 CEST"
    assert humanize.full_local_time(summer, "Europe/Berlin") == "2025-03-30 03:30:00 CEST (UTC+02:00)"
    assert humanize.local_time(summer, "Europe/Berlin", now=summer + timedelta(days=365)).endswith("2025 03:30 CEST")


def test_preview_puts_the_prompt_on_one_line_and_cuts_it_with_an_ellipsis():
    assert humanize.preview("check\n\n  the   build") == "check the build"
    assert humanize.preview("a" * 140) == "a" * 140
    assert humanize.preview("word " * 40, 10) == "word word…"  # 10 characters with the ellipsis


def test_loop_zone_is_the_cron_tz_else_the_hosts(settings):
    settings.TIME_ZONE = "Europe/Berlin"
    assert humanize.loop_zone(loop(kind="cron", cron_expr="0 9 * * *", tz="Asia/Shanghai")) == "Asia/Shanghai"
    assert humanize.loop_zone(loop(kind="every", every_seconds=600)) == "Europe/Berlin"
