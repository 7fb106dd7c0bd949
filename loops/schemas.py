"""In/Out schemas of the loop tools (spec §2, §4). The same models validate requests and
generate the JSON Schemas handed to agents (GET /api/tools)."""

from __future__ import annotations

import posixpath
import re
import unicodedata
from datetime import datetime
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, Field, StringConstraints

from core.errors import InvalidInput
from core.limits import MAX_NAME_CHARS, MAX_SAFE_INTEGER
from core.schemas import Identifier, StrictModel, Text
from timing import schedule_text, schedules

MAX_PROMPT_CHARS = 100_000

# contract §16, a loop's bounds. An instant as epoch ms up to the last millisecond of year 9999 (the
# last a datetime can hold); a count that fits the column (a positive 32-bit integer).
LAST_MS = 253_402_300_799_999
MAX_RUNS_LIMIT = 2**31 - 1
EndsAt = Annotated[
    int,
    Field(
        ge=0,
        le=LAST_MS,
        description="An instant in epoch milliseconds (a JSON integer): the loop's last occurrence is the last "
        "delivery time at or before it (with a cron jitter, the delayed time), after which it is completed "
        "(event `ended`). Must lie in the future: one already passed is 422 invalid_input.",
    ),
]
MaxRuns = Annotated[
    int,
    Field(
        ge=1,
        le=MAX_RUNS_LIMIT,
        description="The number of delivered scheduled runs (runs_delivered) after which the loop is completed "
        "(event `ended`); manual runs (run now) do not count. Must exceed runs_delivered: 422 invalid_input "
        "otherwise.",
    ),
]

Seconds = Annotated[
    int,
    Field(ge=1, le=MAX_SAFE_INTEGER, description="Whole seconds, 1..2^53-1 (a JSON integer)."),
]


# The prompt travels inside spec §6's XML message, and XML 1.0 cannot carry these at all (not even
# as character references): refused here, so that every accepted prompt parses back byte for byte.
_NOT_IN_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _deliverable(value: str) -> str:
    if found := _NOT_IN_XML.search(value):
        raise ValueError(
            f"'prompt' contains U+{ord(found.group()):04X}, a character the delivered message (XML) "
            "cannot carry; remove it."
        )
    return value


def _trimmed_non_empty(value: str) -> str:
    value = value.strip()
    if not value:
        raise ValueError("'prompt' must not be empty or only whitespace.")
    return value


Prompt = Annotated[
    str,
    Text(MAX_PROMPT_CHARS),
    AfterValidator(_trimmed_non_empty),
    AfterValidator(_deliverable),
    Field(
        description="What to send; trimmed, non-empty, at most 100,000 characters, no control characters "
        "but tab and line breaks.",
        # Documents _deliverable for schema readers (agents, fuzzers); the validator gives the message.
        json_schema_extra={"pattern": "^[^\u0000-\u0008\u000b\u000c\u000e-\u001f\ufffe\uffff]*$"},
    ),
]


class EverySchedule(StrictModel):
    __doc__ = schedules.Every.summary  # the schema's description: the kind's own words

    kind: Literal["every"]
    every_seconds: Seconds

    def to_schedule(self, *, host_tz: str, now: datetime) -> schedules.Schedule:
        return schedules.Every(self.every_seconds)


class AfterSchedule(StrictModel):
    __doc__ = schedules.After.summary  # the schema's description: the kind's own words

    kind: Literal["after"]
    after_seconds: Seconds

    def to_schedule(self, *, host_tz: str, now: datetime) -> schedules.Schedule:
        return schedules.After(self.after_seconds)


class CronSchedule(StrictModel):
    __doc__ = schedules.Cron.summary  # the schema's description: the kind's own words

    kind: Literal["cron"]
    expr: Annotated[str, Text(200), Field(min_length=1, description='e.g. "30 9 * * 1-5"')]
    tz: Annotated[str, Text(64), Field(description='IANA name, e.g. "Asia/Shanghai"')] | None = None

    def to_schedule(self, *, host_tz: str, now: datetime) -> schedules.Schedule:
        """STYLE 3: valid only if a next occurrence can be computed; else the contract's error."""
        try:
            return schedules.validate_cron(self.expr, self.tz, host_tz=host_tz, now=now)
        except schedule_text.ScheduleError as exc:
            raise InvalidInput(exc.message, field=exc.field, code=exc.code) from exc


ScheduleIn = Annotated[EverySchedule | AfterSchedule | CronSchedule, Field(discriminator="kind")]


class LoopCreateIn(StrictModel):
    prompt: Prompt
    schedule: ScheduleIn | None = Field(None, description="Required unless the deprecated time_in_seconds is used.")
    session_id: (
        Annotated[
            Identifier,
            Field(
                description='Omit for the calling session; "self" for the global interface; "new" for a fresh '
                "session per occurrence; or an existing session ID."
            ),
        ]
        | None
    ) = None
    preset: Annotated[Identifier, Field(description='Only with session_id "new": the preset to mount.')] | None = None
    time_in_seconds: Seconds | None = Field(
        None, deprecated=True, description="Deprecated v1 alias for schedule {kind: every, every_seconds}."
    )

    @property
    def v1_interval(self) -> int | None:
        # Read without pydantic's DeprecationWarning: using the alias is logged by the tool instead.
        return self.__dict__["time_in_seconds"]

    def to_schedule(self, *, host_tz: str, now: datetime) -> schedules.Schedule:
        """The schedule this input asks for: `schedule`, or the deprecated v1 `time_in_seconds`
        (spec §10) standing for an `every` schedule; one of the two, never both."""
        if self.schedule is not None and self.v1_interval is not None:
            raise InvalidInput(
                "Give either 'schedule' or the deprecated 'time_in_seconds', not both.", field="time_in_seconds"
            )
        if self.v1_interval is not None:
            return schedules.Every(self.v1_interval)
        if self.schedule is None:
            raise InvalidInput(
                '\'schedule\' is required, e.g. {"kind": "every", "every_seconds": 600}.', field="schedule"
            )
        return self.schedule.to_schedule(host_tz=host_tz, now=now)


MAX_LIST_PAGE = 1000


class LoopListIn(StrictModel):
    """The whole list, or with limit one page of it; the order is the same either way (contract §3)."""

    session_id: (
        Annotated[
            Identifier, Field(description='Omit for the calling session; "global" for every loop; or a session ID.')
        ]
        | None
    ) = None
    limit: (
        Annotated[
            int,
            Field(
                ge=1,
                le=MAX_LIST_PAGE,
                description="Page size, 1..1000: at most this many loops, with next_cursor while more remain. "
                "Omit for the whole list.",
            ),
        ]
        | None
    ) = None
    cursor: (
        Annotated[
            str,
            StringConstraints(strict=True, min_length=1, max_length=1000),
            Field(
                description="The next_cursor of the previous page, as it came: the next page of the same list "
                "(same session_id, and the same caller for {}). Needs limit."
            ),
        ]
        | None
    ) = None


class LoopDeleteIn(StrictModel):
    loop_id: Identifier | None = None
    id: Identifier | None = Field(None, deprecated=True, description="Deprecated v1 alias of loop_id.")

    @property
    def v1_id(self) -> str | None:
        return self.__dict__["id"]


class EveryOut(BaseModel):
    kind: Literal["every"]
    every_seconds: int


class AfterOut(BaseModel):
    kind: Literal["after"]
    after_seconds: int


class CronOut(BaseModel):
    kind: Literal["cron"]
    expr: str
    tz: str | None = None


class LoopView(BaseModel):
    loop_id: str
    prompt: str
    schedule: EveryOut | AfterOut | CronOut
    session_id: str
    preset: str | None = None
    created_by_session_id: str
    created_at: int
    next_at: int | None = None
    last_run_at: int | None = None
    last_result: Literal["delivered", "failed"] | None = None
    last_error: str | None = None
    state: Literal["scheduled", "running", "overdue", "completed", "failed", "paused"]


def normalised_directory(path: str) -> str:
    """An absolute path with `.`, `..` and repeated or trailing slashes resolved by its text alone,
    as DSH resolves a path it is given (Node's path.resolve). Symlinks are kept, not resolved: the
    path names a directory on the host, which dshloop may not see as the host does, and DSH
    resolves links itself each time it places a session (workspace.create takes the realpath), so a
    link an operator repoints (`/srv/app/current`) is followed from the next run on."""
    normal = posixpath.normpath(path)
    # POSIX lets a leading "//" mean something else, so normpath keeps it; on Linux it is "/".
    return "/" + normal.lstrip("/")


def _workspace_path(value: str) -> str:
    if not value.startswith("/"):
        raise ValueError("'workspace' must be an absolute directory path, e.g. \"/home/me/project\".")
    if any(unicodedata.category(ch).startswith("C") for ch in value):
        raise ValueError("'workspace' must not contain control characters.")
    return normalised_directory(value)


Workspace = Annotated[
    str,
    Text(1024),
    AfterValidator(_workspace_path),
    Field(
        description="The absolute directory every fresh session of this loop starts in, stored normalised "
        "(`.`, `..` and repeated slashes resolved; symlinks kept). On a host with workspaces (DSH) it must "
        "be a directory the host can read: another is 422 invalid_input."
    ),
]
PermissionPreset = Annotated[
    Identifier,
    Field(description="A host permission preset (DSHLOOP_PERMISSION_PRESETS), applied to each fresh session."),
]
OverlapIn = Literal["allow", "skip"]

_UNATTENDED = 'Only for loops targeting "new" (contract §14).'


class LoopDetail(LoopView):
    """contract §9: what an operator sees of a loop; §14: how a `new` loop's runs are bounded."""

    name: str | None = None
    revision: int
    paused_at: int | None = None
    pause_reason: str | None = None
    consecutive_failures: int
    schedule_text: str = Field(
        description='The schedule in words, as the panels show it ("every 10 min", "09:30 on weekdays, Asia/Shanghai").'
    )
    workspace: str | None = Field(
        None,
        description=f"{_UNATTENDED} The directory each fresh session starts in, captured from the creating "
        'session; "" when none was known: the host\'s default (DSHLOOP_DSH_CWD).',
    )
    permission_preset: str | None = Field(
        None,
        description=f'{_UNATTENDED} The host permission preset applied to each fresh session; "" for the '
        "host's own default (loops made before presets existed).",
    )
    overlap: OverlapIn | None = Field(
        None,
        description=f"{_UNATTENDED} allow: every occurrence starts a fresh session; skip: an occurrence "
        "while the loop's previous turn still runs is recorded skipped.",
    )
    ends_at: int | None = Field(
        description="contract §16: the instant (epoch ms) of the loop's end, null for none. Its last occurrence is "
        "the last delivery time at or before it; then it is completed (event `ended`, never deleted). "
        "`upcoming` stops there. A paused loop whose ends_at passes is completed without a run.",
    )
    max_runs: int | None = Field(
        description="contract §16: the loop is completed (event `ended`) once runs_delivered reaches this; null "
        "for no limit.",
    )
    runs_delivered: int = Field(
        description="contract §16: how many of the loop's scheduled runs were delivered, ever (a counter kept on "
        "the loop: retention never lowers it). A catch-up after downtime is one run; manual runs (run now), "
        "failed and skipped ones do not count.",
    )


class LoopPatchIn(StrictModel):
    """contract §9 PATCH: any of these; validated as loop_create validates them. `name: null`
    removes the name."""

    name: (
        Annotated[str, Text(MAX_NAME_CHARS), Field(description="A display name for people; null removes it.")] | None
    ) = None
    prompt: Prompt | None = None
    schedule: ScheduleIn | None = None
    session_id: Annotated[Identifier, Field(description='"self", "new" or an existing session ID.')] | None = None
    preset: Annotated[Identifier, Field(description='Only with session_id "new".')] | None = None
    workspace: Workspace | None = Field(None, description=f"{_UNATTENDED} null: the host's default (DSHLOOP_DSH_CWD).")
    permission_preset: PermissionPreset | None = Field(
        None, description=f"{_UNATTENDED} null: the host's own default preset."
    )
    overlap: OverlapIn | None = Field(None, description=f"{_UNATTENDED} null: allow.")
    ends_at: EndsAt | None = Field(None, description="contract §16: when the loop ends (epoch ms); null: no end.")
    max_runs: MaxRuns | None = Field(
        None, description="contract §16: how many delivered runs it ends after; null: no limit."
    )


class LoopListOut(BaseModel):
    """Loops by next_at (absent last), then created_at, then loop_id (contract §3)."""

    loops: list[LoopView]
    next_cursor: str | None = Field(
        None,
        description="Only while more loops remain after this page: send it back as cursor, with the same "
        "session_id and a limit, for the next page.",
    )


class LoopDeleteOut(BaseModel):
    deleted: Literal[True]
    loop_id: str


class UpcomingOut(BaseModel):
    fire_times: list[int]


class LoopPageOut(BaseModel):
    """`GET /api/loops` (scope `manage`): the loops a person's filters select, first `limit` of them
    in loop_list's order (contract §3), as LoopDetail, with the titles of the sessions they target."""

    loops: list[LoopDetail]
    more: bool = Field(description="True when more loops match than `limit`: narrow the filters to see them.")
    titles: dict[str, str] = Field(
        description="The folded title (spec §7) of each actual session the listed loops target, where it has one."
    )
