"""The DSH plugin's Loops panel form offers the schedule kinds timing.schedules describes.

The plugin reads them from dsh-plugin/src/schedule-kinds.json, so a change to a kind must regenerate it:
`.venv/bin/python manage.py schedule_kinds > dsh-plugin/src/schedule-kinds.json`.
"""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

from django.conf import settings
from django.core.management import call_command

from timing import schedule_kinds

CHECKED_IN = Path(settings.BASE_DIR) / "dsh-plugin" / "src" / "schedule-kinds.json"


def test_the_plugins_schedule_kinds_are_what_manage_py_schedule_kinds_writes():
    out = StringIO()
    call_command("schedule_kinds", stdout=out)
    assert json.loads(out.getvalue()) == schedule_kinds.describe()
    assert json.loads(CHECKED_IN.read_text()) == schedule_kinds.describe(), (
        "dsh-plugin/src/schedule-kinds.json is stale: run `.venv/bin/python manage.py schedule_kinds > "
        "dsh-plugin/src/schedule-kinds.json` and rebuild the plugin (scripts/build-dsh-plugin.sh)"
    )
