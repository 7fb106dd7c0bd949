"""`manage.py schedule_kinds`: the schedule kinds as the DSH plugin's Loops panel form offers them.

Each kind is described once, on its dataclass in timing.schedules; the plugin (dsh-plugin/) carries
that description built in, as it does the tool catalogue. After a change to a kind:
`.venv/bin/python manage.py schedule_kinds > dsh-plugin/src/schedule-kinds.json`, then rebuild the
plugin (scripts/build-dsh-plugin.sh); a test fails while the checked-in copy differs.
"""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand

from timing import schedule_kinds


class Command(BaseCommand):
    help = "Print each schedule kind's name, label for people and fields as JSON (the DSH plugin's copy)."

    def handle(self, *args, **options):
        self.stdout.write(json.dumps(schedule_kinds.describe(), indent=2, ensure_ascii=False))
