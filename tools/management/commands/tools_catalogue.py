"""`manage.py tools_catalogue`: GET /api/tools's body, written without a server.

The DSH plugin (dsh-plugin/) carries this catalogue built in, so that an agent has the five tools
even when dshloop is down while DSH starts (contract §13); `make dsh-plugin-catalogue` regenerates
dsh-plugin/src/catalogue.json and a test keeps the checked-in copy equal to this output.
"""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand

from tools.catalogue import TOOLS


def catalogue() -> dict:
    return {"tools": [tool.definition() for tool in TOOLS]}


class Command(BaseCommand):
    help = "Print the five tools' names, descriptions and JSON Schemas (GET /api/tools) as JSON."

    def handle(self, *args, **options):
        self.stdout.write(json.dumps(catalogue(), indent=2, ensure_ascii=False))
