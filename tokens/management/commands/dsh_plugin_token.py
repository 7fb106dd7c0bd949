"""`manage.py dsh_plugin_token`: a fresh token for DSH's dshloop plugin, printed on stdout, nothing kept.

Each DSH launch gets its own (`make run-dsh` pipes it into DSH on a file descriptor, docs/dsh.md
"The plugin's token"), and every earlier plugin token is revoked: no plaintext is kept at rest for
an agent to find, and a token that leaked stops working at the next launch.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand
from django.db import transaction

from tokens.models import PLUGIN_SCOPES, PLUGIN_TOKEN_NAME, ApiToken
from tokens.services import token_create

TOKEN_NAME = PLUGIN_TOKEN_NAME
__all__ = ["PLUGIN_SCOPES", "TOKEN_NAME", "Command"]


class Command(BaseCommand):
    help = (
        "Revoke the DSH plugin's earlier tokens and print a new one (scopes tools and manage) on stdout, for the "
        "launcher to hand to DSH on a file descriptor (DSHLOOP_TOKEN_FD). Nothing else goes to stdout."
    )

    def handle(self, *args, **options):
        with transaction.atomic():
            revoked = ApiToken.objects.filter(name=TOKEN_NAME, revoked=False).update(revoked=True)
            _, raw = token_create(name=TOKEN_NAME, scopes=PLUGIN_SCOPES)
        self.stdout.write(raw)
        self.stderr.write(
            f"A new token for the DSH plugin (scope {', '.join(PLUGIN_SCOPES)}); {revoked} earlier one(s) revoked."
        )
