"""`manage.py dsh_plugin_token FILE`: the token DSH's dshloop plugin uses (scope `tools`), kept in FILE.

`make run-dsh` hands it to DSH as DSHLOOP_TOKEN. The file (owner-only) keeps it across runs; a
file whose token no longer works here (a new database, a revoked token) gets a new one.
"""

from __future__ import annotations

import os
from pathlib import Path

from django.core.management.base import BaseCommand

from tokens.services import token_authenticate, token_create

TOKEN_NAME = "dsh-plugin"


class Command(BaseCommand):
    help = "Ensure FILE holds a working token with scope tools for DSH's dshloop plugin; prints nothing else."

    def add_arguments(self, parser):
        parser.add_argument("file", type=Path)

    def handle(self, *args, file: Path, **options):
        try:
            current = file.read_text().strip()
        except FileNotFoundError:
            current = ""
        token = token_authenticate(current)
        if token is not None and "tools" in token.scopes:
            return
        _, raw = token_create(name=TOKEN_NAME, scopes=["tools"])
        file.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        descriptor = os.open(file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w") as out:
            out.write(raw + "\n")
        file.chmod(0o600)  # an older file made readable by others
        self.stderr.write(f"API token for the DSH plugin created (scope tools), kept in {file}")
