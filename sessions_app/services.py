"""Writes to the embedded host's registry (contract §5): sessions, presets, inbox."""

from __future__ import annotations

import secrets
from collections import Counter
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime

from django.db import IntegrityError, transaction
from django.utils import timezone

from core.bulk import insert_rows
from core.locks import lock_each_until_commit, lock_until_commit
from core.timeutil import truncate_to_ms

from .models import InboxMessage, PluginDelivery, Preset, SessionHeader, SessionStatus
from .titles import first_prompt_kept

_HEADER_FIELDS = ("user_title", "generated_title", "first_prompt", "status", "preset", "model", "global_interface")


def new_session_id() -> str:
    return "ses_" + secrets.token_hex(8)


def lock_global_interface() -> None:
    """Serialize the claims of global_interface until the transaction ends. PostgreSQL: a
    transaction-scoped advisory lock; SQLite: its IMMEDIATE transactions already serialize every
    writer. A row lock on the current holder would not do: with no holder, or with one that a claim
    has just cleared, two claims find nothing to wait for and both set the flag."""
    lock_until_commit("dshloop-global-interface")


@transaction.atomic
def session_upsert(*, session_id: str, changes: dict, now: datetime | None = None) -> SessionHeader:
    """Create or update one session header; at most one session is the global interface.

    Claiming global_interface moves the flag from its holder to this session, as a PUT after
    another does (contract §5); concurrent claims take turns, so each answer was true when it
    committed and the last claim holds the flag. Callers creating one new session at once all
    succeed: one row is inserted, the others' fields update it (INSERT … ON CONFLICT DO UPDATE).
    """
    unknown = set(changes) - set(_HEADER_FIELDS)
    if unknown:
        raise ValueError(f"unknown session fields {sorted(unknown)}")
    claims = bool(changes.get("global_interface"))
    if claims:
        lock_global_interface()
    # Taken after the lock, so that of claims made at once the holder has the newest updated_at;
    # stored as the API shows it (ISO, ms).
    now = truncate_to_ms(now or timezone.now())
    if claims:
        # Clear it elsewhere first (the partial unique index keeps it single). Run after the lock,
        # this statement sees the flag where the previous claim committed it.
        SessionHeader.objects.filter(global_interface=True).exclude(session_id=session_id).update(
            global_interface=False
        )
    # One statement inserts the session or updates only the fields given: a concurrent insert of
    # the same ID makes this one an update (PostgreSQL waits for it to commit), never an error.
    SessionHeader.objects.bulk_create(
        [SessionHeader(session_id=session_id, updated_at=now, **changes)],
        update_conflicts=True,
        unique_fields=["session_id"],
        update_fields=[*changes, "updated_at"],
    )
    return SessionHeader.objects.get(session_id=session_id)


# The fields an HTTP host owns in the cache (contract §6); global_interface and created_for stay.
_HOST_HEADER_FIELDS = ("status", "updated_at", "preset", "model", "user_title", "generated_title", "first_prompt")


def session_headers_cache(*, headers: list[SessionHeader]) -> None:
    """Refresh the cached headers of an HTTP host's sessions in one bulk upsert: new sessions are
    inserted, known ones get the host's fields (INSERT … ON CONFLICT (session_id) DO UPDATE).

    The headers come validated (sessions_app.hosts.http). One ID sent twice keeps its newest
    header: PostgreSQL refuses to update one row twice in a statement. PostgreSQL writes any list
    in one statement; SQLite in one per 99 sessions (Django keeps it under 999 bound parameters).
    """
    newest: dict[str, SessionHeader] = {}
    for header in headers:
        known = newest.get(header.session_id)
        if known is None or header.updated_at >= known.updated_at:
            newest[header.session_id] = header
    if newest:
        # In one order, ID order: two refreshes that lock some of the same rows (a host's list is
        # newest first, and that order changes between calls) then wait for each other rather than
        # deadlock on PostgreSQL.
        SessionHeader.objects.bulk_create(
            sorted(newest.values(), key=lambda header: header.session_id),
            update_conflicts=True,
            unique_fields=["session_id"],
            update_fields=list(_HOST_HEADER_FIELDS),
        )


def preset_upsert(*, name: str, mountable: bool) -> Preset:
    preset, _ = Preset.objects.update_or_create(name=name, defaults={"mountable": mountable})
    return preset


def session_resume(*, session_id: str, now: datetime | None = None) -> SessionHeader:
    """Resume a cold session (-> idle) with its preset and model untouched (spec §5)."""
    now = truncate_to_ms(now or timezone.now())  # stored as the API shows it (ISO, ms)
    SessionHeader.objects.filter(session_id=session_id, status=SessionStatus.COLD).update(
        status=SessionStatus.IDLE, updated_at=now
    )
    return SessionHeader.objects.get(session_id=session_id)


def session_create_for(
    *, occurrence_key: str, preset: str, model: str, first_prompt: str, now: datetime | None = None
) -> SessionHeader:
    """A fresh session for one occurrence of a `new` loop; the same occurrence gets the same one.
    Of `first_prompt` it keeps what titles read (titles.first_prompt_kept): the prompt itself is
    delivered to the session's inbox, its one copy on this host."""
    now = truncate_to_ms(now or timezone.now())  # stored as the API shows it (ISO, ms)
    existing = SessionHeader.objects.filter(created_for=occurrence_key).first()
    if existing:
        return existing
    try:
        with transaction.atomic():
            return SessionHeader.objects.create(
                session_id=new_session_id(),
                created_for=occurrence_key,
                status=SessionStatus.IDLE,
                updated_at=now,
                preset=preset,
                model=model,
                first_prompt=first_prompt_kept(first_prompt),
            )
    except IntegrityError:  # another worker made it first
        return SessionHeader.objects.get(created_for=occurrence_key)


_INBOX_COLUMNS = (
    "message_id",
    "session_id",
    "text",
    "wakeup",
    "delivery",
    "source",
    "occurrence_key",
    "created_at",
    "seq",
)


def inbox_deliver_many(messages: list[tuple[str, str, dict, str, str]], now: datetime | None = None) -> list[str]:
    """Insert many messages (session_id, text, source, occurrence_key, delivery) at once; an
    occurrence already in an inbox is skipped (idempotent). Returns the message IDs, in order.

    Each session's messages are numbered in its inbox after those committed before them (`seq`,
    see InboxMessage): its lock is taken first and held until the caller's transaction commits, so
    a writer that reaches a session after another waits for the other's commit, and the INSERT
    that follows, reading the highest seq then, gets higher numbers. Whatever is visible below a
    message's seq has committed before it: paged by seq, a cursor never moves past a message still
    to come. No deadlock: the locks are taken in one order by every writer, and after them a
    delivery only writes rows it holds already (its runs and loops) and the metric counters of its
    results, which no transaction waiting here holds. SQLite serializes writers."""
    now = truncate_to_ms(now or timezone.now())
    if not messages:
        return []
    # Without a transaction of the caller's, the locks and the messages go together; within one
    # (the delivery's), no savepoint: it would cost two statements on the hot path.
    with transaction.atomic(savepoint=False):
        lock_each_until_commit(_INBOX_LOCKS, (session_id for session_id, *_ in messages))
        place: Counter[str] = Counter()
        rows = []
        for session_id, text, source, key, delivery in messages:
            place[session_id] += 1
            rows.append(
                ("msg_" + secrets.token_hex(8), session_id, text, True, delivery, source, key, now, place[session_id])
            )
        # In a separate statement from the locks: a READ COMMITTED statement reads the commits made
        # before it began, so this one sees those of the writers it waited for. A skipped
        # (re-driven) occurrence leaves its number unused: a gap, which paging does not mind.
        inserted = insert_rows(
            InboxMessage, _INBOX_COLUMNS, rows, skip_conflicts_on=("occurrence_key",), count_on=("seq", "session_id")
        )
    message_ids = {row[6]: row[0] for row in rows if row[0] in inserted}
    # Those that were already there keep their first message (a re-driven occurrence: rare).
    if missing := [row[6] for row in rows if row[0] not in inserted]:
        message_ids.update(
            InboxMessage.objects.filter(occurrence_key__in=missing).values_list("occurrence_key", "message_id")
        )
    return [message_ids[key] for _, _, _, key, _ in messages]


_INBOX_LOCKS = "inbox"  # the namespace of the inbox locks, one per session (core.locks)


@contextmanager
def plugin_deliveries_offered(offers: list[tuple[str, str, dict]]) -> Iterator[None]:
    """While the body runs (the calls that ring DSH's plugin for a batch), the plugin may read each
    offer's `request` under its key (models.PluginDelivery); after it, whatever happened, it may not.
    `offers` are (key, session ID, request); a stale offer of a key (a scheduler that died mid-call)
    is replaced. One write to offer a batch and one to withdraw it, in the caller's connection: the
    calls that ring the plugin side by side then touch no database."""
    now = timezone.now()
    rows = {
        key: PluginDelivery(key=key, session_id=session_id, request=request, created_at=now)
        for key, session_id, request in offers
    }
    PluginDelivery.objects.bulk_create(
        list(rows.values()),
        update_conflicts=True,
        unique_fields=["key"],
        update_fields=["session_id", "request", "created_at"],
    )
    try:
        yield
    finally:
        PluginDelivery.objects.filter(key__in=list(rows)).delete()


def plugin_delivery_offered(*, key: str, session_id: str, request: dict) -> AbstractContextManager[None]:
    """One offer (plugin_deliveries_offered)."""
    return plugin_deliveries_offered([(key, session_id, request)])
