"""`manage.py tools_catalogue`: GET /api/tools's body, written without a server.

The DSH plugin (dsh-plugin/) carries this catalogue built in, so that an agent has the five tools
even when dshloop is down while DSH starts (contract §13). After a change to a tool:
`.venv/bin/python manage.py tools_catalogue > dsh-plugin/src/catalogue.json`; a test fails while the
checked-in copy differs.
"""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand

from tools.catalogue import catalogue


class Command(BaseCommand):
    help = "Print the five tools' names, descriptions and JSON Schemas (GET /api/tools) as JSON."

    def handle(self, *args, **options):
        self.stdout.write(json.dumps(catalogue(), indent=2, ensure_ascii=False))
