"""`manage.py import_v1_loops` (spec §10, contract §7): validation of every record, the
per-record report, idempotence across imports and overlapping exports, --dry-run, and the v1 grid
continued from created_at with the anti-burst rule (spec §3)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from io import StringIO

import pytest
import time_machine
from django.core.management import CommandError, call_command

from core.timeutil import from_ms, to_ms
from loops import v1_import
from loops.models import Loop, LoopRun
from loops.notify import notify_clocks
from scheduler.claims import claim_due
from sessions_app.models import SessionHeader

NOW = datetime(2025, 6, 2, 10, 0, tzinfo=UTC)  # a Monday
NOW_MS = 1748858400000
MINUTE_MS = 60_000


@pytest.fixture
def sessions(make_session):
    for session_id in ("ses_a", "ses_b", "ses_cold"):
        make_session(session_id, status="cold" if session_id == "ses_cold" else "idle")


@pytest.fixture
def frozen():
    with time_machine.travel(NOW, tick=False):
        yield


@pytest.fixture
def export(tmp_path):
    """Write records (or raw text) as an export file; returns its path."""
    counter = iter(range(1000))

    def write(records=None, *, raw: str | bytes | None = None) -> str:
        path = tmp_path / f"v1-export-{next(counter)}.json"
        data = raw if raw is not None else json.dumps(records)
        path.write_bytes(data if isinstance(data, bytes) else data.encode())
        return str(path)

    return write


def run_import(path: str, *args: str) -> list[str]:
    out = StringIO()
    call_command("import_v1_loops", path, *args, stdout=out)
    return out.getvalue().splitlines()


def loop_of(v1_id: str) -> Loop:
    return Loop.objects.get(v1_id=v1_id)


def record(v1_id: str, **fields) -> dict:
    return {"id": v1_id, "prompt": "Check the deploy", "time_in_seconds": 600, "session_id": "ses_a", **fields}


def at(ms: int) -> str:
    return from_ms(ms).isoformat(timespec="milliseconds")


UNKNOWN_KEY = "Unknown property 'enabled'; remove it (every object accepts only its documented properties)."
EMPTY_PROMPT = "'prompt' must not be empty or only whitespace."


# --- a mixed export: every record is reported, valid ones are imported ---------------------------


def test_mixed_export_imports_the_valid_records_and_reports_every_record(export, sessions, frozen):
    run_import(export([record("v1_old", prompt="Imported last week")]))
    created = NOW_MS - 58 * MINUTE_MS - 20_000  # 5 ten-minute grid points ago, and 8 min 20 s
    records = [
        record("v1_daily", prompt="  Daily report \n", time_in_seconds=86_400),
        record("v1_grid", prompt="Check CI", session_id="ses_b", created_at=created),
        record("v1_daily", prompt="Daily report, again"),  # duplicate id within the file
        record("v1_old", prompt="Imported last week"),  # imported by an earlier run
        record("v1_zero", time_in_seconds=0),
        record("v1_negative", time_in_seconds=-600),
        record("v1_float", time_in_seconds=600.0),
        record("v1_bool", time_in_seconds=True),
        {"id": "v1_no_session", "prompt": "p", "time_in_seconds": 600},
        record("v1_unknown_session", session_id="ses_gone"),
        record("v1_reserved", session_id="self"),
        record("v1_empty_prompt", prompt=""),
        record("v1_blank_prompt", prompt=" \n\t "),
        record("v1_unknown_key", enabled=True),
        {"prompt": "no id", "time_in_seconds": 600, "session_id": "ses_a"},
        "v1_not_an_object",
        record(""),
        record("v1_future", created_at=NOW_MS + 1),
        record("v1_cold", session_id="ses_cold", time_in_seconds=3600),
    ]

    lines = run_import(export(records))

    daily, grid, old, cold = (loop_of(v1_id).loop_id for v1_id in ("v1_daily", "v1_grid", "v1_old", "v1_cold"))
    assert lines == [
        f"imported v1_daily -> {daily}: every 86400 s to ses_a, next at {at(NOW_MS + 86_400_000)}",
        f"imported v1_grid -> {grid}: every 600 s to ses_b, next at {at(created + 50 * MINUTE_MS)} "
        "(due now: one catch-up delivery)",
        f"already present v1_daily ({daily}); this record differs in prompt, time_in_seconds and was not applied",
        f"already present v1_old ({old})",
        "invalid v1_zero: 'time_in_seconds' must be at least 1.",
        "invalid v1_negative: 'time_in_seconds' must be at least 1.",
        "invalid v1_float: 'time_in_seconds' must be a JSON integer.",
        "invalid v1_bool: 'time_in_seconds' must be a JSON integer.",
        "invalid v1_no_session: 'session_id' is required.",
        "invalid v1_unknown_session: the host knows no session 'ses_gone' (list_sessions shows the ones it knows).",
        "invalid v1_reserved: 'session_id': 'self' is a reserved selector, not a session ID.",
        f"invalid v1_empty_prompt: {EMPTY_PROMPT}",
        f"invalid v1_blank_prompt: {EMPTY_PROMPT}",
        f"invalid v1_unknown_key: {UNKNOWN_KEY}",
        "invalid #14: 'id' is required.",
        "invalid #15: a record must be a JSON object, not a JSON string.",
        "invalid #16: 'id' must not be empty.",
        f"invalid v1_future: 'created_at' ({NOW_MS + 1}) is in the future (now is {NOW_MS}); it must be the "
        "epoch milliseconds when the v1 loop was created.",
        f"imported v1_cold -> {cold}: every 3600 s to ses_cold, next at {at(NOW_MS + 3_600_000)}",
        "imported 3, already present 2, invalid 14",
    ]
    assert set(Loop.objects.values_list("v1_id", flat=True)) == {"v1_old", "v1_daily", "v1_grid", "v1_cold"}


def test_imported_loop_is_an_every_loop_owned_by_its_session(export, sessions, frozen, api):
    run_import(export([record("v1_a", prompt="  Check the deploy\n", session_id="ses_b", time_in_seconds=900)]))

    loop = loop_of("v1_a")
    assert (loop.kind, loop.every_seconds, loop.preset, loop.state) == ("every", 900, "", "scheduled")
    assert (loop.session_id, loop.created_by_session_id) == ("ses_b", "ses_b")
    [view] = api.tool("loop_list", {"session_id": "ses_b"}).json()["loops"]
    assert view == {
        "loop_id": loop.loop_id,
        "prompt": "Check the deploy",
        "schedule": {"kind": "every", "every_seconds": 900},
        "session_id": "ses_b",
        "created_by_session_id": "ses_b",
        "created_at": NOW_MS,
        "next_at": NOW_MS + 900_000,
        "state": "scheduled",
    }


def test_records_accept_the_same_prompts_and_durations_as_loop_create(export, sessions, frozen):
    lines = run_import(
        export(
            [
                record("v1_max", time_in_seconds=2**53 - 1),
                record("v1_too_big", time_in_seconds=2**53),
                record("v1_string", time_in_seconds="600"),
                record("v1_long", prompt="x" * 100_001),
                record("v1_nul", prompt="a\x00b"),
                record("v1_null_created", created_at=None),
                record("v1_float_created", created_at=float(NOW_MS)),
                record("v1_negative_created", created_at=-1),
            ]
        )
    )
    assert lines[0].startswith(f"imported v1_max -> {loop_of('v1_max').loop_id}: every 9007199254740991 s")
    assert lines[1:5] == [
        "invalid v1_too_big: 'time_in_seconds' must be at most 9007199254740991 (2^53-1).",
        "invalid v1_string: 'time_in_seconds' must be a JSON integer.",
        "invalid v1_long: 'prompt' is too long: at most 100000 characters.",
        "invalid v1_nul: 'prompt': Text must not contain NUL characters.",
    ]
    assert lines[5].startswith("imported v1_null_created -> ")  # null is "omitted", as in the tools
    assert lines[6:8] == [
        "invalid v1_float_created: 'created_at' must be a JSON integer.",
        "invalid v1_negative_created: 'created_at' must be at least 0.",
    ]


def test_a_record_with_several_problems_reports_all_of_them(export, sessions):
    [line, _] = run_import(export([{"id": "v1_bad", "prompt": " ", "time_in_seconds": 0, "session_id": "new"}]))
    assert line == (
        f"invalid v1_bad: {EMPTY_PROMPT} 'time_in_seconds' must be at least 1. "
        "'session_id': 'new' is a reserved selector, not a session ID."
    )


def test_a_key_given_twice_makes_the_record_invalid(export, sessions):
    raw = (
        '[{"id": "v1_a", "prompt": "p", "time_in_seconds": 600, "time_in_seconds": 60, "session_id": "ses_a"},'
        ' {"id": "v1_b", "id": "v1_c", "prompt": "p", "time_in_seconds": 600, "session_id": "ses_a"}]'
    )
    assert run_import(export(raw=raw)) == [
        "invalid v1_a: 'time_in_seconds' given more than once, so the record is ambiguous.",
        "invalid #1: 'id' given more than once, so the record is ambiguous.",
        "imported 0, already present 0, invalid 2",
    ]
    assert not Loop.objects.exists()


def test_a_duplicate_id_after_an_invalid_first_record_is_imported(export, sessions):
    lines = run_import(export([record("v1_a", time_in_seconds=0), record("v1_a")]))
    assert lines[0] == "invalid v1_a: 'time_in_seconds' must be at least 1."
    assert lines[1].startswith(f"imported v1_a -> {loop_of('v1_a').loop_id}")


# --- idempotence: importing again never makes a second copy ---------------------------------------


def test_reimporting_the_same_file_imports_nothing_and_creates_no_rows(export, sessions):
    path = export([record("v1_a"), record("v1_b", session_id="ses_b"), record("v1_bad", session_id="ses_gone")])
    run_import(path)
    before = list(Loop.objects.order_by("loop_id").values())

    lines = run_import(path)

    a, b = loop_of("v1_a").loop_id, loop_of("v1_b").loop_id
    assert lines == [
        f"already present v1_a ({a})",
        f"already present v1_b ({b})",
        "invalid v1_bad: the host knows no session 'ses_gone' (list_sessions shows the ones it knows).",
        "imported 0, already present 2, invalid 1",
    ]
    assert list(Loop.objects.order_by("loop_id").values()) == before


def test_overlapping_export_imports_only_the_new_records(export, sessions):
    run_import(export([record("v1_a"), record("v1_b")]))
    first = {loop.v1_id: loop.loop_id for loop in Loop.objects.all()}

    lines = run_import(export([record("v1_b"), record("v1_c"), record("v1_a", session_id="ses_b")]))

    assert lines == [
        f"already present v1_b ({first['v1_b']})",
        f"imported v1_c -> {loop_of('v1_c').loop_id}: " + lines[1].split(": ", 1)[1],
        f"already present v1_a ({first['v1_a']}); this record differs in session_id and was not applied",
        "imported 1, already present 2, invalid 0",
    ]
    assert Loop.objects.count() == 3
    assert loop_of("v1_a").session_id == "ses_a"  # the first import stands


def test_already_present_even_when_the_record_is_no_longer_valid(export, sessions):
    run_import(export([record("v1_a", session_id="ses_b")]))
    SessionHeader.objects.filter(session_id="ses_b").delete()
    assert (
        run_import(export([record("v1_a", session_id="ses_b")]))[0]
        == f"already present v1_a ({loop_of('v1_a').loop_id})"
    )


def test_a_concurrent_import_of_the_same_id_is_reported_as_already_present(export, sessions, monkeypatch):
    # Another import commits v1_a between this import's presence check and its insert: the unique
    # v1_id column makes the insert fail, and the record is reported, not imported twice.
    validate = v1_import._validate
    racer = {}

    def validate_then_race(record, *, now):
        result = validate(record, now=now)
        racer["loop"] = Loop.objects.create(
            loop_id="loop_racer",
            prompt="Check the deploy",
            kind="every",
            every_seconds=600,
            session_id="ses_a",
            created_by_session_id="ses_a",
            created_at=now,
            next_at=now + timedelta(minutes=10),
            v1_id="v1_a",
        )
        return result

    monkeypatch.setattr(v1_import, "_validate", validate_then_race)
    lines = run_import(export([record("v1_a")]))
    assert lines == ["already present v1_a (loop_racer)", "imported 0, already present 1, invalid 0"]
    assert list(Loop.objects.values_list("loop_id", flat=True)) == ["loop_racer"]


def test_an_unreachable_host_stops_the_import_after_the_records_already_handled(export, sessions, monkeypatch):
    from sessions_app.hosts import get_host
    from sessions_app.hosts.base import HostError

    class FlakyHost:
        def get_session(self, session_id):
            if session_id == "ses_b":
                raise HostError("The DSH host timed out.", transient=True)
            return get_host().get_session(session_id)

    monkeypatch.setattr(v1_import, "get_host", FlakyHost)
    out = StringIO()
    with pytest.raises(CommandError, match=r"checking record #1 .*timed out.*Run the import again"):
        call_command(
            "import_v1_loops", export([record("v1_a"), record("v1_b", session_id="ses_b"), record("v1_c")]), stdout=out
        )
    assert out.getvalue().startswith(f"imported v1_a -> {loop_of('v1_a').loop_id}")
    assert list(Loop.objects.values_list("v1_id", flat=True)) == ["v1_a"]


# --- --dry-run -------------------------------------------------------------------------------------


def test_dry_run_reports_what_would_happen_and_writes_nothing(
    export, sessions, frozen, django_capture_on_commit_callbacks
):
    path = export([record("v1_a"), record("v1_a"), record("v1_bad", time_in_seconds=0)])
    with django_capture_on_commit_callbacks() as callbacks:
        lines = run_import(path, "--dry-run")

    assert lines == [
        f"would import v1_a: every 600 s to ses_a, next at {at(NOW_MS + 600_000)}",
        "already present v1_a (earlier in this file)",
        "invalid v1_bad: 'time_in_seconds' must be at least 1.",
        "dry run: would import 1, already present 1, invalid 1; nothing was written",
    ]
    assert not Loop.objects.exists()
    assert callbacks == []


def test_dry_run_after_an_import_reports_the_records_already_present(export, sessions):
    path = export([record("v1_a")])
    run_import(path)
    assert run_import(path, "--dry-run") == [
        f"already present v1_a ({loop_of('v1_a').loop_id})",
        "dry run: would import 0, already present 1, invalid 0; nothing was written",
    ]
    assert Loop.objects.count() == 1


def test_import_wakes_the_sleeping_clocks_once_per_imported_loop(export, sessions, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks() as callbacks:
        run_import(export([record("v1_a"), record("v1_b"), record("v1_bad", time_in_seconds=0)]))
    assert callbacks == [notify_clocks, notify_clocks]


# --- the v1 grid continues from created_at (spec §3 anti-burst) --------------------------------------


def test_created_at_in_the_past_continues_the_v1_grid_with_one_catch_up(export, sessions, api):
    created = NOW_MS - 3 * 3_600_000 - 25 * MINUTE_MS  # 3 h 25 min ago, a 1-hour loop
    with time_machine.travel(NOW, tick=False):
        run_import(export([record("v1_hourly", time_in_seconds=3600, created_at=created)]))
        loop = loop_of("v1_hourly")
        upcoming = api.get(f"/api/loops/{loop.loop_id}/upcoming", count=3).json()["fire_times"]
        view = api.tool("loop_list", {"session_id": "ses_a"}).json()["loops"][0]

    latest_due = created + 3 * 3_600_000  # 25 minutes ago
    assert to_ms(loop.created_at) == created and view["created_at"] == created
    assert to_ms(loop.next_at) == view["next_at"] == latest_due
    # Exactly one fire time is in the past: the catch-up; then the grid goes on, not from now.
    assert upcoming == [latest_due, created + 4 * 3_600_000, created + 5 * 3_600_000]
    assert view["state"] == "overdue"


def test_the_clock_delivers_one_catch_up_for_an_imported_loop_then_keeps_the_grid(export, sessions):
    created = NOW_MS - 45 * MINUTE_MS - 7_000  # a 10-minute loop, 4 grid points in the past
    with time_machine.travel(NOW, tick=False):
        run_import(export([record("v1_a", created_at=created)]))
    assert to_ms(loop_of("v1_a").next_at) == created + 40 * MINUTE_MS  # the catch-up, due at import
    later = NOW + timedelta(minutes=20)  # no scheduler ran until two more grid points had passed
    with time_machine.travel(later, tick=False):
        [run_id] = claim_due(now=later)

    run, loop = LoopRun.objects.get(run_id=run_id), loop_of("v1_a")
    assert to_ms(run.scheduled_at) == created + 60 * MINUTE_MS  # one delivery: the latest due grid point
    assert run.missed == 2  # the import's catch-up point and the one after it, folded in
    assert to_ms(loop.next_at) == created + 70 * MINUTE_MS


def test_created_at_less_than_one_interval_ago_waits_for_the_first_grid_point(export, sessions, frozen):
    created = NOW_MS - 4 * MINUTE_MS
    lines = run_import(export([record("v1_a", created_at=created)]))
    assert lines[0].endswith(f"next at {at(created + 10 * MINUTE_MS)}")
    assert to_ms(loop_of("v1_a").next_at) == created + 10 * MINUTE_MS


def test_created_at_on_a_grid_point_equal_to_now_is_due_now(export, sessions, frozen):
    created = NOW_MS - 20 * MINUTE_MS
    lines = run_import(export([record("v1_a", created_at=created)]))
    assert lines[0].endswith(f"next at {at(NOW_MS)} (due now: one catch-up delivery)")


def test_without_created_at_the_grid_starts_at_import_time(export, sessions, frozen):
    run_import(export([record("v1_a", time_in_seconds=90)]))
    loop = loop_of("v1_a")
    assert (to_ms(loop.created_at), to_ms(loop.next_at)) == (NOW_MS, NOW_MS + 90_000)


def test_created_at_in_the_future_is_invalid_and_creates_nothing(export, sessions, frozen):
    lines = run_import(export([record("v1_a", created_at=NOW_MS + 60_000)]))
    assert lines[0].startswith("invalid v1_a: 'created_at' (")
    assert not Loop.objects.exists()


# --- the file as a whole ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ('{"id": "v1_a"}', "must hold a JSON list of v1 loop records, not a JSON object"),
        ("null", "not a JSON null"),
        ('[{"id": ', "is not valid JSON"),
        (b'["\xff"]', "is not UTF-8 text"),
        ("", "is not valid JSON"),
    ],
)
def test_a_file_that_is_not_a_json_list_is_a_command_error(export, raw, message, db):
    with pytest.raises(CommandError, match=message):
        run_import(export(raw=raw))
    assert not Loop.objects.exists()


def test_a_missing_file_is_a_command_error(tmp_path, db):
    with pytest.raises(CommandError, match="Cannot read .*No such file"):
        run_import(str(tmp_path / "nothere.json"))


def test_an_empty_list_imports_nothing(export, db):
    assert run_import(export([])) == ["imported 0, already present 0, invalid 0"]


def test_a_byte_order_mark_is_tolerated(export, sessions):
    lines = run_import(export(raw=b"\xef\xbb\xbf" + json.dumps([record("v1_a")]).encode()))
    assert lines[-1] == "imported 1, already present 0, invalid 0"


def test_help_says_invalid_records_do_not_change_the_exit_status():
    from loops.management.commands.import_v1_loops import Command

    help_text = " ".join(Command().create_parser("manage.py", "import_v1_loops").format_help().split())
    assert "exit status is 0 even when some are invalid" in help_text
    assert "--dry-run" in help_text
