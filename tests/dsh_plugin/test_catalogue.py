"""The DSH plugin's built-in tool catalogue is dshloop's own (contract §13).

The plugin offers these descriptions and schemas to agents while dshloop is unreachable, so a
change to a tool must regenerate dsh-plugin/src/catalogue.json:
`.venv/bin/python manage.py tools_catalogue > dsh-plugin/src/catalogue.json`.
"""

from __future__ import annotations

import json
from pathlib import Path

from django.conf import settings

from tests.conftest import ApiClient
from tools.catalogue import catalogue

CHECKED_IN = Path(settings.BASE_DIR) / "dsh-plugin" / "src" / "catalogue.json"


def test_the_plugins_built_in_catalogue_is_what_get_api_tools_serves(tools_token):
    served = ApiClient(tools_token).get("/api/tools").json()
    assert served == catalogue()
    assert json.loads(CHECKED_IN.read_text()) == served, (
        "dsh-plugin/src/catalogue.json is stale: run `.venv/bin/python manage.py tools_catalogue > "
        "dsh-plugin/src/catalogue.json`"
    )
