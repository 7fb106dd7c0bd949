"""DSHLOOP_LOG_FORMAT: the JSON formatter record by record, and the settings that pick it
(read in a child process per case, as tests/test_settings.py does)."""

from __future__ import annotations

import json
import logging
import re
import sys
from datetime import UTC, datetime

from core.logformat import JsonFormatter
from tests.test_settings import import_settings, refused

ISO_MS_UTC = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")
OCCURRENCE = {
    "loop_id": "loop_1",
    "run_id": "run_1",
    "occurrence_key": "loop_1@1796119200000",
    "scheduled_at": "2026-12-01T10:00:00.000Z",
    "lateness_ms": 42,
    "outcome": "delivered",
    "attempt": 1,
    "target": None,
    "missed": 0,
}


def record(message: str, *args, exc_info=None, **extra) -> logging.LogRecord:
    logger = logging.getLogger("dshloop.delivery")
    return logger.makeRecord(logger.name, logging.INFO, __file__, 1, message, args, exc_info, extra=extra)


def formatted(entry: logging.LogRecord) -> dict:
    line = JsonFormatter().format(entry)
    assert "\n" not in line and "\r" not in line, line  # one record, one line
    return json.loads(line)


def test_a_plain_record_is_time_level_logger_and_the_formatted_message():
    entry = record("clock %s started", "vm-1")
    out = formatted(entry)
    assert out == {"time": out["time"], "level": "INFO", "logger": "dshloop.delivery", "message": "clock vm-1 started"}
    assert ISO_MS_UTC.fullmatch(out["time"])
    written = datetime.strptime(out["time"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    assert abs(written.timestamp() - entry.created) < 0.001


def test_an_occurrence_s_fields_are_top_level_keys_beside_the_human_message():
    out = formatted(record("loop=%s outcome=delivered", "loop_1", occurrence=OCCURRENCE))
    assert {key: out[key] for key in OCCURRENCE} == OCCURRENCE
    assert out["message"] == "loop=loop_1 outcome=delivered" and out["target"] is None


def test_an_occurrence_never_overrides_the_record_s_own_keys():
    out = formatted(record("the record's", occurrence={**OCCURRENCE, "message": "forged", "level": "DEBUG"}))
    assert (out["message"], out["level"], out["run_id"]) == ("the record's", "INFO", "run_1")


def test_an_exception_is_its_traceback_in_one_string_field():
    try:
        raise ValueError("boom\nsecond line")
    except ValueError:
        out = formatted(record("delivering a batch of %d raised", 3, exc_info=sys.exc_info()))
    assert out["message"] == "delivering a batch of 3 raised"
    assert out["exception"].startswith("Traceback (most recent call last):")
    assert out["exception"].endswith("ValueError: boom\nsecond line")


def test_newlines_and_unicode_survive_on_one_line():
    message = "prompt:\n  check the déploiement ✓\r\n\tdone 🚀"
    line = JsonFormatter().format(record("%s", message))
    assert line.isascii() and "\n" not in line  # escaped: valid whatever the stream's encoding
    assert json.loads(line)["message"] == message


def test_a_value_json_cannot_write_is_written_as_its_text():
    moment = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
    out = formatted(record("odd", occurrence={"scheduled_at": moment, "error": KeyError("x"), 7: "seven"}))
    assert (out["scheduled_at"], out["error"], out["7"]) == (str(moment), "'x'", "seven")


def test_a_record_without_a_dict_occurrence_has_no_extra_keys():
    out = formatted(record("odd", occurrence="not a dict"))
    assert set(out) == {"time", "level", "logger", "message"}


# The settings: a child process configures logging as runloops does and logs through the console
# handler (stderr): our logger, one occurrence, and django-q2's.
LOG_THROUGH_SETTINGS = f"""
import os
os.environ["DJANGO_SETTINGS_MODULE"] = "dshloop.settings"
import django
django.setup()
import logging
logging.getLogger("dshloop.delivery").info("loop=%s outcome=delivered", "loop_1", extra={{"occurrence": {OCCURRENCE!r}}})
logging.getLogger("django-q").error("Failed 'scheduler.tasks.deliver'")
logging.getLogger("django-q").info("Processed 'scheduler.tasks.deliver'")  # below django-q's WARNING
"""


def logged(tmp_path, **env: str) -> list[str]:
    done = import_settings(tmp_path / "var", LOG_THROUGH_SETTINGS, **env)
    assert done.returncode == 0, done.stderr
    return done.stderr.splitlines()


def test_human_lines_are_the_default(tmp_path):
    lines = logged(tmp_path)
    assert len(lines) == 2, lines
    assert re.fullmatch(r"\S+ \S+ INFO dshloop\.delivery loop=loop_1 outcome=delivered", lines[0])
    assert re.fullmatch(r"\S+ \S+ ERROR django-q Failed 'scheduler.tasks.deliver'", lines[1])
    explicit = logged(tmp_path, DSHLOOP_LOG_FORMAT="human")
    assert [line.split(" ", 2)[2] for line in explicit] == [line.split(" ", 2)[2] for line in lines]  # but the time


def test_json_makes_every_line_of_the_console_handler_json_django_q_s_included(tmp_path):
    ours, theirs = (json.loads(line) for line in logged(tmp_path, DSHLOOP_LOG_FORMAT="json"))
    assert {key: ours[key] for key in OCCURRENCE} == OCCURRENCE
    assert (ours["logger"], ours["message"]) == ("dshloop.delivery", "loop=loop_1 outcome=delivered")
    assert (theirs["logger"], theirs["level"]) == ("django-q", "ERROR")


def test_another_log_format_fails_loudly_naming_the_valid_ones(tmp_path):
    for value in ("JSON", "text", "logfmt"):
        message = refused(tmp_path / "var", DSHLOOP_LOG_FORMAT=value)
        assert "DSHLOOP_LOG_FORMAT must be one of ['human', 'json']" in message and repr(value) in message
