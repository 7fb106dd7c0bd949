"""API tokens: bearer credentials for agents (scope `tools`) and host callers (scope `host`)."""

from __future__ import annotations

import hashlib

from django.db import models

SCOPES = ("tools", "host", "manage")
# The DSH plugin's token (manage.py dsh_plugin_token): it acts for DSH Web, whose channel any local
# process can call, so no person is known to stand behind its operator calls (loops.api.vouched).
PLUGIN_TOKEN_NAME = "dsh-plugin"
# Contract §15: the agents' tools, and the operator API behind DSH Web's loop cards (a loop's detail)
# and its Loops panel; never `host`, so a leaked one cannot pose as the host.
PLUGIN_SCOPES = ["tools", "manage"]


def hash_token(raw: str) -> str:
    # A token is 256 random bits, so a plain SHA-256 is enough (no salt/stretching needed):
    # it cannot be brute-forced, and a lookup by hash stays one indexed query.
    return hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()


class ApiToken(models.Model):
    name = models.CharField(max_length=100)
    # Only the hash is stored; the raw token is shown once, when it is created.
    key_hash = models.CharField(max_length=64, unique=True, editable=False)
    prefix = models.CharField(max_length=12, editable=False, help_text="First characters, to recognise a token.")
    scopes = models.JSONField(default=list)
    created_at = models.DateTimeField(auto_now_add=True)
    revoked = models.BooleanField(default=False)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…, {', '.join(self.scopes)})"

    def has_scope(self, scope: str) -> bool:
        return scope in self.scopes
