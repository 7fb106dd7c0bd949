"""Loop deadlines as SQLite stores them: text, compared as text, so only one form may be stored.

PostgreSQL keeps `next_at` as a typed timestamp. SQLite keeps whatever was written: Django writes
"YYYY-MM-DD HH:MM:SS[.ffffff]" in UTC, but a row written by hand or by another tool may hold
"2026-12-02T07:00:00Z", "…+08:00", an integer or garbage. Text comparison then puts it in the
wrong place in the clock's queue, the claim's compare-and-swap (which binds Django's form) never
matches it, and Django's converter raises on a value it cannot parse; left alone, such rows come
back at the head of every claim batch and nothing else fires.

So every stored deadline is settled into Django's form: a readable one is rewritten in place (and
claimed once it is due in truth), an unreadable one is set aside: the loop is paused with
UNREADABLE_REASON and an `auto_paused` event, which health reports as a problem until an operator
resumes the loop (its next occurrence is then computed from now).

That is housekeeping's work, off the clock's path: `runloops` repairs every such row before its
clock starts (repair_all, a start-up check), and a housekeeping job repairs those written while it
runs, every few seconds, in bounded steps (`settle_step`), a few statements each, between which the
clock claims as usual. The claim and the clock's wakeup read only deadlines in Django's form (one
SQL condition, `in_clock_form`): a row written by hand while a scheduler runs is unseen by the
clock until the next pass has repaired it, and never stops or spins it.
What a pass repaired is logged as a summary, one line per kind of repair (`Repairs`); each
set-aside loop has its own event.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, TypedDict

from django.db import connection, transaction
from django.db.models import QuerySet, TextField
from django.db.models.functions import Cast
from django.utils.dateparse import parse_datetime

from core.bulk import update_rows
from loops.events import SCHEDULER, record_events
from loops.models import UNREADABLE_REASON, EventKind, Loop, LoopState

if TYPE_CHECKING:
    from django_stubs_ext import WithAnnotations

logger = logging.getLogger("dshloop.clock")

SETTLE_BATCH = 500  # loops per repair step: a few statements, a short hold of SQLite's write lock

# Django's stored form, as GLOB patterns: the rows the housekeeping pass need not look at.
_DIGITS = "[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9] [0-9][0-9]:[0-9][0-9]:[0-9][0-9]"
_STORED_FORMS = (_DIGITS, _DIGITS + ".[0-9][0-9][0-9][0-9][0-9][0-9]")


def stores_text() -> bool:
    """Whether deadlines are stored as text (SQLite) and so must be settled."""
    return connection.vendor == "sqlite"


class StoredNextAt(TypedDict):
    # The text the database holds (SQL NULL for a loop with no deadline).
    stored_next_at: str | None


def stored(queryset: QuerySet[Loop]) -> QuerySet[WithAnnotations[Loop, StoredNextAt]]:
    """`queryset` with each row's stored `next_at` as it is in the database (`stored_next_at`)."""
    return queryset.annotate(stored_next_at=Cast("next_at", output_field=TextField()))


def parse_stored(value: object) -> datetime | None:
    """The aware UTC moment a stored value names, in any form Django's parser reads (a naive
    one is UTC, as Django stores it), or None when it names none."""
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, str):
        try:
            parsed = parse_datetime(value.strip())
        except ValueError:  # the right shape, an impossible date ("2026-13-45 …")
            return None
        if parsed is None:
            return None
        moment = parsed
    else:  # an integer, a float, a blob: not a timestamp
        return None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def django_form(moment: datetime) -> str:
    form = connection.ops.adapt_datetimefield_value(moment)
    assert form is not None  # None only stands for None
    return form


@dataclass
class Repairs:
    """What settling did, for one summary in the log (a line per kind, not a line per loop)."""

    rewritten: int = 0  # readable, in another form: now in Django's
    set_aside: int = 0  # naming no moment: paused
    rewritten_example: str = ""
    set_aside_example: str = ""

    def log(self, by: str) -> None:
        """Log what was repaired (nothing when nothing was); `by`: who repaired it."""
        if self.rewritten:
            logger.warning(
                "%s: %d loop(s) had next_at stored in another form; rewritten as Django stores it (e.g. %s)",
                by,
                self.rewritten,
                self.rewritten_example,
            )
        if self.set_aside:
            logger.error(
                "%s: %d loop(s) had a next_at that is not a timestamp and were paused, each with an auto_paused "
                "event (e.g. %s); resume one to schedule it from now",
                by,
                self.set_aside,
                self.set_aside_example,
            )


def settle(loops: Sequence[tuple[Loop, object]], *, now: datetime, repairs: Repairs) -> dict[str, datetime]:
    """Bring scheduled loops' stored deadlines (each with the value `raw` its row holds) into
    Django's form, in a few statements whatever their number. Returns the moment each readable one
    names, by loop ID; the unreadable ones are set aside (paused). Inside the caller's transaction
    (SQLite's IMMEDIATE transactions hold the write lock: nobody races it)."""
    moments: dict[str, datetime] = {}
    rewrites: list[list[object]] = []
    unreadable: list[Loop] = []
    for loop, raw in loops:
        moment = parse_stored(raw)
        if moment is None:
            unreadable.append(loop)
            repairs.set_aside += 1
            repairs.set_aside_example = repairs.set_aside_example or f"loop {loop.loop_id}: {raw!r}"
            logger.debug("loop %s: next_at %r is not a timestamp; the loop is paused", loop.loop_id, raw)
            continue
        moments[loop.loop_id] = moment
        if raw != django_form(moment):
            rewrites.append([loop.loop_id, moment])
            repairs.rewritten += 1
            example = f"loop {loop.loop_id}: {raw!r} as {django_form(moment)}"
            repairs.rewritten_example = repairs.rewritten_example or example
            logger.debug("loop %s: next_at %r rewritten as %s", loop.loop_id, raw, django_form(moment))
    update_rows(Loop, ("next_at",), rewrites)
    _set_aside(unreadable, now=now)
    return moments


def _set_aside(loops: list[Loop], *, now: datetime) -> None:
    if not loops:
        return
    Loop.objects.filter(loop_id__in=[loop.loop_id for loop in loops]).update(
        state=LoopState.PAUSED, next_at=None, paused_at=now, pause_reason=UNREADABLE_REASON
    )
    record_events(loops, EventKind.AUTO_PAUSED, SCHEDULER, at=now)


def _in_stored_form(table: str, *, negate: bool = False) -> str:
    """A WHERE clause: the row's next_at is text in Django's form naming a real moment (or, negated,
    anything else). SQLite reads its date back through julianday: "2026-02-30 …" comes back as
    March, "2026-06-02 09:99:00" as NULL, so neither passes for Django's form."""
    forms = " OR ".join(f"{table}.next_at GLOB '{form}'" for form in _STORED_FORMS)
    seconds = f"substr({table}.next_at, 1, 19)"
    clause = f"(typeof({table}.next_at) = 'text' AND ({forms}) AND datetime(julianday({seconds})) IS {seconds})"
    return f"NOT {clause}" if negate else clause


def in_clock_form(loops: QuerySet[Loop]) -> QuerySet[Loop]:
    """The loops the clock may read: all of them where deadlines are typed; on SQLite, those whose
    stored deadline is in Django's form. One SQL condition, no repair: a row written by hand in
    another form waits, unseen by the clock, for housekeeping (settle_step), where Django's converter
    would raise on it and stop every claim and every wakeup (or, read as due, spin the clock)."""
    return in_stored_form(loops) if stores_text() else loops


def in_stored_form(loops: QuerySet[Loop], *, negate: bool = False) -> QuerySet[Loop]:
    """The loops whose stored next_at is text in Django's form (negated: in any other form). Their
    text order is time order, and Django's converter reads them: what the clock's queries expect."""
    table = connection.ops.quote_name(Loop._meta.db_table)
    return loops.extra(where=[_in_stored_form(table, negate=negate)])


def settle_step(*, now: datetime, repairs: Repairs | None = None, limit: int = SETTLE_BATCH) -> bool:
    """Settle up to `limit` scheduled loops whose stored deadline is not in Django's form (a scan
    of loop_due_idx), counting into `repairs`; True while more may remain. A no-op where
    deadlines are typed."""
    if not stores_text():
        return False
    to_repair = in_stored_form(Loop.objects.filter(state=LoopState.SCHEDULED, next_at__isnull=False), negate=True)
    # Found before the write transaction: an IMMEDIATE transaction holds SQLite's one write lock from
    # its start, and the scan must not keep the clock's claim waiting.
    loop_ids = list(to_repair.values_list("loop_id", flat=True)[:limit])
    if not loop_ids:
        return False
    _settle_loops(to_repair, loop_ids, now=now, repairs=Repairs() if repairs is None else repairs)
    return len(loop_ids) == limit


def _settle_loops(candidates: QuerySet[Loop], loop_ids: list[str], *, now: datetime, repairs: Repairs) -> None:
    """Settle the loops `loop_ids` found among `candidates`, read again by key in the write
    transaction: a loop edited since it was found (no longer a candidate) keeps its edit."""
    with transaction.atomic(durable=True):
        loops = list(stored(candidates.filter(loop_id__in=loop_ids)).only("loop_id", "revision"))
        settle([(loop, loop.stored_next_at) for loop in loops], now=now, repairs=repairs)


def repair_all(*, now: datetime, by: str, stop: threading.Event | None = None) -> Repairs:
    """Every deadline stored in another form, settled (step by step) and logged as `by`: the check
    `runloops` makes before its clock starts. A no-op where deadlines are typed. Between batches it
    gives up once `stop` is set: runloops stops within its promise however many rows wait, and
    housekeeping repairs the rest on the next start."""
    repairs = Repairs()
    while settle_step(now=now, repairs=repairs, limit=SETTLE_BATCH) and not (stop is not None and stop.is_set()):
        pass
    repairs.log(by)
    return repairs
