"""What the tool surface itself keeps: loop_create's idempotency keys."""

from __future__ import annotations

from django.db import models


class CreateKey(models.Model):
    """One loop_create made under an `Idempotency-Key`, per calling session (docs/tools-and-api.md):
    the same key from the same session answers this call's answer again instead of making a second
    loop; the same key with another request is refused. Kept after its loop is deleted (no foreign
    key), so a late retry still gets the first answer rather than a new loop."""

    # The caller (X-DSH-Session-Id), "" for a call without one: keys are scoped per session.
    session_id = models.CharField(max_length=255)
    key = models.CharField(max_length=255)
    # SHA-256 of the request as validated (LoopCreateIn's JSON): what "the same request" means.
    request_hash = models.CharField(max_length=64)
    loop_id = models.CharField(max_length=40)
    # The first answer, byte for byte: a retry gets what the first call would have returned.
    answer = models.TextField()
    created_at = models.DateTimeField()

    class Meta:
        constraints = [
            # The final guard against two loops for one key: a concurrent retry's insert fails here
            # and its transaction, loop and all, is undone (tools.idempotency).
            models.UniqueConstraint(fields=["session_id", "key"], name="tools_create_key_uniq"),
        ]

    def __str__(self) -> str:
        return f"{self.session_id or '(no session)'}/{self.key} -> {self.loop_id}"
