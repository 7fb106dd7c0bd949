"""Import a v1 loop export into the registry (spec §10, contract §7).

Each valid record becomes an `every` loop targeting its session, keeping the record's v1 id on the
row (`Loop.v1_id`, unique). A record whose id is already on a loop is "already present" and creates
nothing, so importing the same file twice, or an export overlapping an earlier one, never makes a
second active copy of a v1 loop (spec §10: "must not silently create two active copies").
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Annotated, Literal

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone
from pydantic import Field
from pydantic import ValidationError as PydanticValidationError

from core.errors import ApiError
from core.limits import MAX_SAFE_INTEGER
from core.schemas import Identifier, StrictModel
from core.timeutil import from_ms, to_ms, truncate_to_ms
from core.validation import field_path, invalid_input_from, is_identifier
from loops.events import Actor
from loops.models import ActorKind, Loop
from loops.schemas import Prompt, Seconds
from loops.services import create
from sessions_app.hosts import get_host
from sessions_app.schemas import SessionId
from timing import schedules

Outcome = Literal["imported", "already_present", "invalid"]
# The audit trail's actor of an import: a person running the command (no signed-in user to name).
IMPORTER = Actor(ActorKind.USER)


class V1Record(StrictModel):
    """One record of a v1 export: the same field rules as loop_create's (prompt, durations, IDs)."""

    id: Identifier
    prompt: Prompt
    time_in_seconds: Seconds
    session_id: SessionId  # an actual session: "self", "new" and "global" are never session IDs (spec §9)
    created_at: Annotated[int, Field(ge=0, le=MAX_SAFE_INTEGER, description="Epoch milliseconds.")] | None = None


class V1ExportError(ValueError):
    """The file as a whole cannot be read as a v1 export (as opposed to one bad record)."""


@dataclass(frozen=True)
class RecordResult:
    index: int  # position in the export list, from 0 (as in jq '.[3]')
    label: str  # the v1 id, or "#<index>" when the record has no usable id
    outcome: Outcome
    loop_id: str | None = None  # the imported or already present loop (None in a dry run)
    reason: str = ""  # why invalid
    every_seconds: int | None = None
    session_id: str | None = None
    next_at: datetime | None = None
    due_now: bool = False  # next_at is a grid point already due: one catch-up delivery (spec §3)
    differs: tuple[str, ...] = field(default=())  # already present, but this record says otherwise


class _JsonObject(dict):
    """A JSON object that remembers keys given twice (json keeps only the last one silently)."""

    duplicate_keys: tuple[str, ...] = ()


def _object_pairs(pairs: list[tuple[str, object]]) -> _JsonObject:
    obj = _JsonObject(pairs)
    if len(obj) != len(pairs):
        keys = [key for key, _ in pairs]
        obj.duplicate_keys = tuple(key for key in obj if keys.count(key) > 1)
    return obj


def load_v1_export(path: str | Path) -> list:
    """The export's records, unvalidated. Raises V1ExportError if the file is not a JSON list."""
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise V1ExportError(f"Cannot read {path}: {exc.strerror or exc}.") from exc
    try:
        data = json.loads(raw.decode("utf-8-sig"), object_pairs_hook=_object_pairs)
    except UnicodeDecodeError as exc:
        raise V1ExportError(f"{path} is not UTF-8 text: {exc}.") from exc
    except json.JSONDecodeError as exc:
        raise V1ExportError(f"{path} is not valid JSON: {exc}.") from exc
    if not isinstance(data, list):
        raise V1ExportError(f"{path} must hold a JSON list of v1 loop records, not a JSON {_json_type(data)}.")
    return data


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    return "list" if isinstance(value, list) else "object"


def _label(index: int, record: object) -> tuple[str, str | None]:
    """(label, v1 id): the id when it is a usable identifier, else the record's position."""
    if isinstance(record, dict) and "id" not in getattr(record, "duplicate_keys", ()):
        v1_id = record.get("id")
        if is_identifier(v1_id):
            return v1_id, v1_id
    return f"#{index}", None


def _parse(record: object) -> tuple[V1Record | None, str]:
    """The record checked on its own, or None and one line saying everything wrong with it."""
    if not isinstance(record, dict):
        return None, f"a record must be a JSON object, not a JSON {_json_type(record)}."
    if duplicates := getattr(record, "duplicate_keys", ()):
        keys = ", ".join(f"'{key}'" for key in duplicates)
        return None, f"{keys} given more than once, so the record is ambiguous."
    try:
        return V1Record.model_validate(record), ""
    except PydanticValidationError as exc:
        # The same sentences the API answers with (core.validation), all of them: fix once.
        return None, " ".join(_sentence(error) for error in exc.errors())


def _sentence(error) -> str:
    message = invalid_input_from([error]).message
    name = field_path(error.get("loc", ()))
    # Validator messages (e.g. a reserved session ID) may not say which field they are about.
    return message if not name or f"'{name}'" in message else f"'{name}': {message}"


def _validate(record: object, *, now: datetime) -> tuple[V1Record | None, str]:
    """_parse, then what needs the clock and the host: created_at not in the future, a known session."""
    parsed, reason = _parse(record)
    if parsed is None:
        return None, reason
    problems = []
    if parsed.created_at is not None and parsed.created_at > to_ms(now):
        problems.append(
            f"'created_at' ({parsed.created_at}) is in the future (now is {to_ms(now)}); "
            "it must be the epoch milliseconds when the v1 loop was created."
        )
    if get_host().get_session(parsed.session_id) is None:
        problems.append(f"the host knows no session {parsed.session_id!r} (list_sessions shows the ones it knows).")
    if problems:
        return None, " ".join(problems)
    return parsed, ""


def _differences(record: V1Record, loop: Loop) -> tuple[str, ...]:
    """What a record says that its already imported loop does not (v2 loops are never edited)."""
    differs = []
    if record.prompt != loop.prompt:
        differs.append("prompt")
    if loop.schedule != schedules.Every(record.time_in_seconds):
        differs.append("time_in_seconds")
    if record.session_id != loop.session_id:
        differs.append("session_id")
    if record.created_at is not None and record.created_at != to_ms(loop.created_at):
        differs.append("created_at")
    return tuple(differs)


def _present(index: int, label: str, loop: Loop | None, record: object) -> RecordResult:
    differs: tuple[str, ...] = ()
    if loop is not None:
        parsed, _ = _parse(record)
        differs = _differences(parsed, loop) if parsed else ()
    return RecordResult(index, label, "already_present", loop_id=loop.loop_id if loop else None, differs=differs)


def import_v1_records(records: list, *, dry_run: bool = False, now: datetime | None = None) -> Iterator[RecordResult]:
    """Validate and import each record in order, one transaction per record; yields one result each.

    A dry run is the same import inside one transaction that is rolled back at the end, so it
    reports exactly what a real one would (quota counts included) and writes nothing. The host is
    asked about each record's session; a HostError (the DSH host did not answer) propagates:
    records before it are already imported, and importing again skips them.
    """
    now = truncate_to_ms(now or timezone.now())  # one clock for the whole import (STYLE 7)
    if not dry_run:
        yield from _import_each(records, now=now, dry_run=False)
        return
    with transaction.atomic():
        try:
            yield from _import_each(records, now=now, dry_run=True)
        finally:
            transaction.set_rollback(True)


def _import_each(records: list, *, now: datetime, dry_run: bool) -> Iterator[RecordResult]:
    planned: set[str] = set()  # v1 ids this run imported (or, dry, would import)
    for index, record in enumerate(records):
        label, v1_id = _label(index, record)
        if v1_id is not None:
            existing = Loop.objects.filter(v1_id=v1_id).first()
            if dry_run and v1_id in planned:
                existing = None  # made by this dry run: rolled back at its end
            if existing is not None or v1_id in planned:
                # Earlier in this file or in an earlier import: nothing new, whatever the rest says.
                yield _present(index, label, existing, record)
                continue
        parsed, reason = _validate(record, now=now)
        if parsed is None:
            yield RecordResult(index, label, "invalid", reason=reason)
            continue
        try:
            # spec §10 mapping: {prompt, time_in_seconds} -> an every loop targeting the record's
            # session, which is also its creator (the v1 loop was that session's own loop). A v1 grid
            # that started at created_at continues: one catch-up if points are due, no replay. The
            # quota holds here too; the import is idempotent, so after raising the
            # setting, importing again adds the rest.
            loop = create.loop_create(
                prompt=parsed.prompt,
                schedule=schedules.Every(parsed.time_in_seconds),
                target=parsed.session_id,
                preset=None,
                created_by=parsed.session_id,
                created_at=now if parsed.created_at is None else from_ms(parsed.created_at),
                v1_id=parsed.id,
                actor=IMPORTER,
                now=now,
            )
        except ApiError as exc:  # e.g. quota_exceeded
            yield RecordResult(index, label, "invalid", reason=exc.message)
            continue
        except DjangoValidationError as exc:
            yield RecordResult(index, label, "invalid", reason=" ".join(exc.messages))
            continue
        except IntegrityError:
            # Another import of the same id committed between our check and our insert.
            yield _present(index, label, Loop.objects.filter(v1_id=parsed.id).first(), record)
            continue
        planned.add(parsed.id)
        yield RecordResult(
            index,
            label,
            "imported",
            loop_id=None if dry_run else loop.loop_id,
            every_seconds=parsed.time_in_seconds,
            session_id=loop.session_id,
            next_at=loop.next_at,
            due_now=loop.next_at is not None and loop.next_at <= now,
        )
