"""Cached session headers, presets and the embedded host's inbox.

In the embedded (`local`) host mode these rows *are* the host; with the `http` host they are
a cache of the host's durable headers, so that list_sessions never needs a live agent.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q


class ReservedTarget(models.TextChoices):
    """spec §9: exact, case-sensitive names that are never actual session IDs: two loop targets
    and the loop_list scope of every loop."""

    SELF = "self", "the global interface session"
    NEW = "new", "a fresh session for every occurrence"
    GLOBAL = "global", "every loop (a loop_list scope, not a target)"


RESERVED_SESSION_IDS = frozenset(ReservedTarget.values)


class SessionStatus(models.TextChoices):
    RUNNING = "running"
    IDLE = "idle"
    COLD = "cold"


class SessionHeader(models.Model):
    session_id = models.CharField(max_length=255, primary_key=True)
    status = models.CharField(max_length=10, choices=SessionStatus.choices, default=SessionStatus.IDLE)
    updated_at = models.DateTimeField(db_index=True)  # list_sessions: newest first
    preset = models.CharField(max_length=255, blank=True)
    model = models.CharField(max_length=255, blank=True)
    # spec §7 title fold, highest priority first: user_title, generated_title, first_prompt.
    user_title = models.TextField(blank=True)
    generated_title = models.TextField(blank=True)
    # A session the embedded host made for a `new` run keeps only the title of its first prompt
    # (titles.first_prompt_kept); the prompt is its first inbox message.
    first_prompt = models.TextField(blank=True)
    global_interface = models.BooleanField(default=False)
    # A session made for a `new` loop remembers the occurrence it was made for, so a delivery
    # re-driven after a crash finds it again instead of creating a second session.
    created_for = models.CharField(max_length=120, null=True, blank=True, unique=True)

    class Meta:
        ordering = ["-updated_at"]
        constraints = [
            # contract §5: at most one global interface session.
            models.UniqueConstraint(
                fields=["global_interface"], condition=Q(global_interface=True), name="one_global_interface"
            ),
        ]

    def __str__(self) -> str:
        return self.session_id


class Preset(models.Model):
    name = models.CharField(max_length=255, primary_key=True)
    mountable = models.BooleanField(default=True, help_text="Can be mounted when a new session starts.")

    def __str__(self) -> str:
        return self.name


class InboxMessage(models.Model):
    """A message delivered to a session's inbox (the embedded host's stand-in for DSH's inbox)."""

    class Delivery(models.TextChoices):
        NEXT_TURN = "next_turn"
        NEXT_STEP = "next_step"

    message_id = models.CharField(max_length=40, primary_key=True)
    session_id = models.CharField(max_length=255)
    text = models.TextField()
    wakeup = models.BooleanField(default=True)
    delivery = models.CharField(max_length=10, choices=Delivery.choices)
    source = models.JSONField()
    # contract §5: the inbox is idempotent on occurrence_key (one message per occurrence).
    occurrence_key = models.CharField(max_length=120, unique=True)
    # When it was delivered, as the API shows it; taken before its transaction commits, so two
    # writers can commit in the other order: the inbox is paged by `seq`, never by this.
    created_at = models.DateTimeField()
    # Its place in its session's inbox, in commit order: taken in the INSERT, after the highest of
    # its session's, under a lock on the session that its next writer waits for
    # (services.inbox_deliver_many).
    seq = models.BigIntegerField()

    class Meta:
        ordering = ["created_at", "message_id"]
        constraints = [
            # The inbox's pages (sessions_app.api.inbox_messages): WHERE session_id = ? AND seq > ?
            # ORDER BY seq. Unique: a seq handed out twice would be a bug, refused rather than stored.
            models.UniqueConstraint(fields=["session_id", "seq"], name="inbox_session_seq"),
        ]
        indexes = [
            # Retention (contract §10): messages older than DSHLOOP_INBOX_RETENTION_DAYS, oldest first.
            models.Index(fields=["created_at"], name="inbox_created_idx"),
        ]

    def __str__(self) -> str:
        return self.occurrence_key


class PluginDelivery(models.Model):
    """A message the `dsh` host is handing to dshloop's DSH plugin right now (contract §15).

    DSH's loopback channel answers any local process, an agent's bash included, so what arrives
    there cannot be taken on its word: dshloop rings with the key alone, and the plugin reads the
    message here, with its token (GET /api/dsh/deliveries/{key}), and delivers only that. A row
    lives while its delivery call is in flight (sessions_app.hosts.dsh_plugin, services.plugin_deliveries_offered);
    one a crash left behind is not served past OFFER_SECONDS (selectors.plugin_delivery_get)."""

    key = models.CharField(max_length=255, primary_key=True)  # the occurrence's (or notice's) key
    session_id = models.CharField(max_length=255)
    # What the plugin delivers: {sessionId, text, key, summary, loop, unattended, notice}.
    request = models.JSONField()
    created_at = models.DateTimeField()

    def __str__(self) -> str:
        return self.key
