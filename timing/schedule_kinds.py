"""The schedule kinds as plain data, for the forms that offer them and the JSON the DSH plugin reads.

Each kind is described once, on its dataclass in timing.schedules (`kind`, `label`, `summary`); the
fields it takes are its dataclass fields. dshloop's panel renders its choices from choices(), and
`manage.py schedule_kinds` writes describe() to dsh-plugin/src/schedule-kinds.json, from which the
plugin's Loops panel form takes its kinds.
"""

from __future__ import annotations

import dataclasses
import typing
from types import NoneType

from timing.schedules import SCHEDULE_TYPES, Schedule

# The JSON type of a field of each Python type.
_JSON_TYPES = {int: "integer", str: "string"}


@dataclasses.dataclass(frozen=True)
class KindField:
    """One field a kind takes: its name, its JSON type ("integer" or "string"), whether it must be given."""

    name: str
    type: str
    required: bool


def fields_of(schedule_type: type[Schedule]) -> tuple[KindField, ...]:
    hints = typing.get_type_hints(schedule_type)
    described = []
    for field in dataclasses.fields(schedule_type):
        hint = hints[field.name]
        # `str | None` is an optional string: its JSON type is that of its one member that is not None.
        (python_type,) = [arg for arg in typing.get_args(hint) or (hint,) if arg is not NoneType]
        required = field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING
        described.append(KindField(field.name, _JSON_TYPES[python_type], required))
    return tuple(described)


def choices() -> list[tuple[str, str]]:
    """(kind, label) for each kind, in SCHEDULE_TYPES' order: a form's menu."""
    return [(schedule_type.kind, schedule_type.label) for schedule_type in SCHEDULE_TYPES]


def describe() -> list[dict[str, object]]:
    """Each kind as JSON: its name, its label and the fields it takes."""
    return [
        {
            "kind": schedule_type.kind,
            "label": schedule_type.label,
            "fields": [dataclasses.asdict(field) for field in fields_of(schedule_type)],
        }
        for schedule_type in SCHEDULE_TYPES
    ]
