"""Each schedule kind described once, on its dataclass, as the forms offering it read it."""

from __future__ import annotations

from timing import schedule_kinds, schedules


def test_every_kind_is_described_with_its_label_and_the_fields_its_dataclass_takes():
    described = {entry["kind"]: entry for entry in schedule_kinds.describe()}
    assert list(described) == [schedule_type.kind for schedule_type in schedules.SCHEDULE_TYPES]
    assert described["every"]["fields"] == [{"name": "every_seconds", "type": "integer", "required": True}]
    assert described["cron"] == {
        "kind": "cron",
        "label": "On a cron schedule",
        "fields": [
            {"name": "expr", "type": "string", "required": True},
            {"name": "tz", "type": "string", "required": False},
        ],
    }


def test_a_forms_choices_are_each_kind_with_its_label_in_order():
    assert schedule_kinds.choices() == [("every", "Every…"), ("after", "Once, after…"), ("cron", "On a cron schedule")]
