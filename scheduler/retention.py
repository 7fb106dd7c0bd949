"""Retention (contract §10): each loop keeps its newest DSHLOOP_RUN_HISTORY_LIMIT terminal runs and
the embedded inbox its last DSHLOOP_INBOX_RETENTION_DAYS of messages. Open runs are never pruned and
do not count towards the limit; the audit trail (LoopEvent) is never pruned.

A pass is one `Pruner`, stepped until it reports that nothing remains. Every step is one bounded
unit of work, so that the housekeeping thread can pause between steps and no statement holds a lock
for long (each DELETE is its own short transaction):

1. a page of loop IDs with their run counts: `SELECT loop_id, COUNT(*) … WHERE loop_id > <cursor>
   GROUP BY loop_id ORDER BY loop_id LIMIT PAGE`, which walks the loop_id index in order and stops
   after PAGE loops (never a GROUP BY over the whole table). Runs have no foreign key, so the runs
   of deleted loops are walked too. A loop with no more runs than it keeps costs nothing more;
2. for a loop over the limit: its cutoff, the oldest terminal run it keeps (the limit-th newest by
   scheduled_at, then run_id), then DELETEs of at most BATCH of its terminal runs below the cutoff;
3. the loops deleted more than DSHLOOP_INBOX_RETENTION_DAYS ago (DeletedLoop, a page of them at a
   time): every terminal run they kept goes, as in step 2, and then what was kept of the loop. Their
   runs outlive them (spec §4) for as long as the messages those runs delivered (the inbox's
   retention), not forever: nothing new is added to a deleted loop's history, so its last runs
   would otherwise stay for good;
4. the inbox: DELETEs of at most BATCH messages older than the cutoff, oldest first
   (inbox_created_idx).

What goes with a run: the session the embedded host made for it, if it was a `new` run (the
SessionHeader whose created_for is the run's occurrence key, never a session a user or a host
made) and that session's inbox messages, in the run's batch transaction; then, once the loop's
runs are done, the prompts of revisions (LoopPrompt) that no run refers to any more and the loop
is not at. A session made for a run is the host's record of that one turn: the host (which
stands in for DSH, where the session's first prompt and its inbox text live) keeps it as long as
the run history that explains it, so the copies of a long prompt it holds are bounded with the
runs. A run whose session is still `running` (its turn goes on) is kept, with its session, until
the turn ends; a session reported `running` but not updated for DSHLOOP_INBOX_RETENTION_DAYS is
taken as abandoned (its inbox is past retention already), so a host that never reports a turn's
end cannot make them pile up beyond that.

A cutoff stays valid while the pass deletes below it: the runs a loop gains are newer, open runs
that finish only add terminal runs, and another pruner (a second scheduler) deletes only below a
cutoff of its own, so at least `limit` terminal runs always remain at or above ours.

`headroom` (the housekeeping thread's choice) leaves a loop alone until it holds more than
limit + headroom runs, and then prunes it down to exactly `limit`. The cutoff query reads every run
of the loop from the table (status is not in the index), so without headroom a loop that gained
one run since the last pass would cost `limit` row reads to delete one; with it, each cutoff read
pays for at least `headroom` deletions. `manage.py prune` uses no headroom: the rule exactly.

A pass with nothing to prune is one index-only page statement per PAGE loops; pruning a loop costs
its cutoff's row reads (every run of the loop) and one DELETE.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Count, Exists, OuterRef, Q, QuerySet

from loops.models import DeletedLoop, Loop, LoopPrompt, LoopRun, RunStatus
from loops.runs import OPEN_STATUSES
from sessions_app.models import InboxMessage, SessionHeader, SessionStatus

TERMINAL_STATUSES = tuple(status for status in RunStatus if status not in OPEN_STATUSES)
_AFTER_EVERY_RUN = datetime(9999, 1, 1, tzinfo=UTC)  # a cutoff below which every run lies
BATCH = 500  # rows per DELETE statement
PAGE = 100  # loop IDs (with their run counts) per page step


@dataclass(frozen=True)
class LoopPruned:
    """One loop's share of a pass: how many runs went (or would go), and the oldest one kept."""

    loop_id: str
    runs: int
    oldest_kept: datetime
    loop_deleted: bool = False  # a loop deleted before the inbox cutoff: all its runs went, none is kept


@dataclass(frozen=True)
class _Cutoff:
    """The oldest terminal run a loop keeps; its terminal runs ordered before it are pruned."""

    loop_id: str
    scheduled_at: datetime
    run_id: str
    busy_since: datetime  # a `running` session updated since then is in use

    def runs_below(self) -> QuerySet[LoopRun]:
        """Its terminal runs below the cutoff, but for those whose session is still in use."""
        return (
            LoopRun.objects.filter(loop_id=self.loop_id, status__in=TERMINAL_STATUSES)
            .filter(Q(scheduled_at__lt=self.scheduled_at) | Q(scheduled_at=self.scheduled_at, run_id__lt=self.run_id))
            .exclude(Exists(_in_use(self.busy_since).filter(created_for=OuterRef("occurrence_key"))))
        )


def _in_use(since: datetime) -> QuerySet[SessionHeader]:
    """Sessions made for runs whose turn still goes on (created_for's unique index finds a run's)."""
    return SessionHeader.objects.filter(status=SessionStatus.RUNNING, updated_at__gte=since)


class Pruner:
    """One retention pass; `step()` does one bounded unit and returns True while more remains.

    With dry_run it computes the same numbers (counts below the same cutoffs) and deletes nothing.
    Totals accumulate on the object; each loop that loses runs is reported to `on_loop` once its
    share is known (per-loop results are not kept: a pass may visit 100,000 loops).
    """

    def __init__(
        self,
        *,
        now: datetime,
        dry_run: bool = False,
        run_limit: int | None = None,
        inbox_days: int | None = None,
        headroom: int = 0,
        batch: int = BATCH,
        page: int = PAGE,
        on_loop: Callable[[LoopPruned], None] | None = None,
    ) -> None:
        self.dry_run = dry_run
        self.run_limit = run_limit if run_limit is not None else settings.DSHLOOP_RUN_HISTORY_LIMIT
        days = inbox_days if inbox_days is not None else settings.DSHLOOP_INBOX_RETENTION_DAYS
        self.inbox_cutoff = now - timedelta(days=days)
        self.busy_since = self.inbox_cutoff  # a `running` session older than that is abandoned
        self.headroom = headroom
        self.batch = batch
        self.page = page
        self.on_loop = on_loop
        self.runs = 0  # removed (or, dry, to remove)
        self.loops = 0  # loops that lost runs
        self.inbox_messages = 0  # by age
        self.sessions = 0  # made for `new` runs, removed with them
        self.session_messages = 0  # their inbox messages
        self.prompts = 0  # revisions' prompts no run refers to any more
        # Dry: the messages of the sessions counted above that are past the inbox cutoff too, which
        # a real pass removes with their session, before the inbox step could count them again.
        self._expired_session_messages = 0
        self._prompts_of: str | None = None  # the loop whose unused prompts go next
        self._cursor: str | None = None  # the last loop ID paged
        self._deleted_loops = False  # paging the loops deleted before the inbox cutoff (step 3)
        self.deleted_loops = 0  # deleted loops whose last runs went, and what was kept of them
        self._queue: deque[str] = deque()  # loops of the page over the limit
        self._current: _Cutoff | None = None
        self._current_runs = 0
        self._runs_done = False
        self._done = False

    @property
    def done(self) -> bool:
        return self._done

    @property
    def messages(self) -> int:
        """Every inbox message the pass removed (or, dry, would remove): by age, and with the sessions."""
        return self.inbox_messages + self.session_messages

    def run(self) -> Pruner:
        """The whole pass at once (the prune command)."""
        while self.step():
            pass
        return self

    def step(self) -> bool:
        if self._done:
            return False
        if not self._runs_done:
            self._step_runs()
            return True
        if self._step_inbox():
            return True
        self._done = True
        return False

    # -- runs ----------------------------------------------------------------------------------------

    def _step_runs(self) -> None:
        """One unit: a page of loop IDs, one batch of the current loop (its cutoff first), or one
        batch of the prompts its pruned runs left unused."""
        if self._prompts_of is not None:
            self._step_prompts(self._prompts_of)
            return
        if self._current is None:
            if not self._queue:
                self._next_page()
                return
            loop_id = self._queue.popleft()
            self._current = self._all_runs(loop_id) if self._deleted_loops else self._cutoff(loop_id)
            self._current_runs = 0
            if self._current is None:
                return
        cutoff = self._current
        if self.dry_run:
            removed, finished = cutoff.runs_below().count(), True
            self._count_sessions(cutoff)
        else:
            removed, finished = self._delete_batch(cutoff)
        self._current_runs += removed
        if finished:
            self._finish_loop(cutoff)

    @staticmethod
    def _sessions_of(runs: QuerySet[LoopRun]) -> QuerySet[SessionHeader]:
        """The sessions the embedded host made for these runs (only `new` runs have one; every run's
        key is looked up, so a run whose target was not recorded is no exception)."""
        return SessionHeader.objects.filter(created_for__in=runs.values("occurrence_key"))

    def _count_sessions(self, cutoff: _Cutoff) -> None:
        """Dry: the sessions (and their inbox messages) that would go with the loop's runs."""
        sessions = self._sessions_of(cutoff.runs_below())
        messages = InboxMessage.objects.filter(session_id__in=sessions.values("session_id"))
        self.sessions += sessions.count()
        self.session_messages += messages.count()
        self._expired_session_messages += messages.filter(created_at__lt=self.inbox_cutoff).count()

    def _delete_batch(self, cutoff: _Cutoff) -> tuple[int, bool]:
        """One batch of a loop's runs with the sessions made for them and their inboxes, in one
        transaction: a crash between the statements must not leave a session whose run is gone
        (nothing would find it again). Returns how many runs went, and whether the loop is done."""
        with transaction.atomic():
            batch = list(
                cutoff.runs_below().order_by("scheduled_at").values_list("run_id", "occurrence_key")[: self.batch]
            )
            keys = [key for _, key in batch]
            # Locked, and checked again: a turn that started since the batch was read keeps its run.
            sessions = {
                created_for: (session_id, status == SessionStatus.RUNNING and updated_at >= cutoff.busy_since)
                for session_id, created_for, status, updated_at in SessionHeader.objects.select_for_update()
                .filter(created_for__in=keys)
                .order_by("session_id")
                .values_list("session_id", "created_for", "status", "updated_at")
            }
            busy = {key for key, (_, in_use) in sessions.items() if in_use}
            session_ids = [session_id for key, (session_id, in_use) in sessions.items() if not in_use]
            if session_ids:
                self.session_messages += InboxMessage.objects.filter(session_id__in=session_ids).delete()[0]
                self.sessions += SessionHeader.objects.filter(session_id__in=session_ids).delete()[0]
            removed, _ = LoopRun.objects.filter(
                run_id__in=[run_id for run_id, key in batch if key not in busy]
            ).delete()
        return removed, len(batch) < self.batch

    def _next_page(self) -> None:
        """The next PAGE loop IDs after the cursor with their run counts, in one statement that
        reads the loop_id index alone (a GroupAggregate over an index-only scan on PostgreSQL,
        stopped by the LIMIT). Open runs are counted too, so a loop with open runs may be queued
        and still have nothing to prune (_cutoff decides)."""
        if self._deleted_loops:
            self._next_deleted_page()
            return
        runs = LoopRun.objects.order_by("loop_id")
        if self._cursor is not None:
            runs = runs.filter(loop_id__gt=self._cursor)
        page = list(runs.values("loop_id").annotate(runs=Count("*")).values_list("loop_id", "runs")[: self.page])
        if not page:
            self._deleted_loops, self._cursor = True, None
            return
        self._cursor = page[-1][0]
        keep = self.run_limit + self.headroom
        over = [loop_id for loop_id, count in page if count > keep]
        # A loop deleted before the inbox cutoff loses all its runs in step 3, and only there: a dry
        # run, which deletes nothing, would otherwise count its runs here and again there.
        expired = DeletedLoop.objects.filter(loop_id__in=over, deleted_at__lt=self.inbox_cutoff)
        gone = set(expired.values_list("loop_id", flat=True)) if over else set()
        self._queue.extend(loop_id for loop_id in over if loop_id not in gone)

    def _next_deleted_page(self) -> None:
        """The next PAGE loops deleted before the inbox cutoff, by primary key: all their runs go."""
        gone = DeletedLoop.objects.filter(deleted_at__lt=self.inbox_cutoff).order_by("loop_id")
        if self._cursor is not None:
            gone = gone.filter(loop_id__gt=self._cursor)
        page = list(gone.values_list("loop_id", flat=True)[: self.page])
        if not page:
            self._runs_done = True
            return
        self._cursor = page[-1]
        self._queue.extend(page)

    def _all_runs(self, loop_id: str) -> _Cutoff:
        """A deleted loop's cutoff: past its newest run, so that every terminal run of it goes."""
        return _Cutoff(loop_id, _AFTER_EVERY_RUN, "", busy_since=self.busy_since)

    def _cutoff(self, loop_id: str) -> _Cutoff | None:
        """The limit-th newest terminal run, or None when the loop has no more than `limit`."""
        terminal = LoopRun.objects.filter(loop_id=loop_id, status__in=TERMINAL_STATUSES)
        newest = terminal.order_by("-scheduled_at", "-run_id").values_list("scheduled_at", "run_id")
        oldest_kept = list(newest[self.run_limit - 1 : self.run_limit])
        return _Cutoff(loop_id, *oldest_kept[0], busy_since=self.busy_since) if oldest_kept else None

    def _finish_loop(self, cutoff: _Cutoff) -> None:
        self._current = None
        if self._deleted_loops:
            self._forget(cutoff)
        if not self._current_runs:
            return
        if self.dry_run:
            kept = LoopRun.objects.filter(loop_id=cutoff.loop_id).exclude(
                run_id__in=cutoff.runs_below().values("run_id")
            )
            self.prompts += self._unused_prompts(cutoff.loop_id, kept).count()
        else:
            self._prompts_of = cutoff.loop_id
        self.runs += self._current_runs
        self.loops += 1
        if self.on_loop is not None:
            self.on_loop(LoopPruned(cutoff.loop_id, self._current_runs, cutoff.scheduled_at, self._deleted_loops))

    def _forget(self, cutoff: _Cutoff) -> None:
        """What was kept of a deleted loop goes with its last run: kept while a run remains (an open
        one, or one whose fresh session's turn goes on), so that the run is still shown as its."""
        remaining = LoopRun.objects.filter(loop_id=cutoff.loop_id)
        if self.dry_run:  # nothing was deleted: what would remain is what the pass would not delete
            self.deleted_loops += not remaining.exclude(run_id__in=cutoff.runs_below().values("run_id")).exists()
            return
        gone = DeletedLoop.objects.filter(loop_id=cutoff.loop_id).exclude(
            Exists(remaining.filter(loop_id=OuterRef("loop_id")))
        )
        self.deleted_loops += gone.delete()[0]

    def _step_prompts(self, loop_id: str) -> None:
        """One batch of a loop's stored prompts that no run refers to any more. Never the loop's
        current revision (stored by a database from before runs read it from the loop): a claim or
        run now may be making its first run at it right now. One
        statement, so its two checks read one snapshot: a revision the loop has left gets no new
        run, and one it is still at is kept."""
        unused = self._unused_prompts(loop_id, LoopRun.objects.filter(loop_id=loop_id))
        revisions = list(unused.order_by("revision").values_list("revision", flat=True)[: self.batch])
        removed = unused.filter(revision__in=revisions).delete()[0] if revisions else 0
        self.prompts += removed
        if removed < self.batch:
            self._prompts_of = None

    @staticmethod
    def _unused_prompts(loop_id: str, runs: QuerySet[LoopRun]) -> QuerySet[LoopPrompt]:
        """The loop's stored prompts that none of `runs` (its runs that remain) refers to, but for
        the revision the loop is at."""
        return (
            LoopPrompt.objects.filter(loop_id=loop_id)
            .exclude(revision__in=runs.values("revision"))
            .exclude(revision__in=Loop.objects.filter(loop_id=loop_id).values("revision"))
        )

    # -- inbox ---------------------------------------------------------------------------------------

    def _step_inbox(self) -> bool:
        """One batch of expired messages; True while more may remain."""
        expired = InboxMessage.objects.filter(created_at__lt=self.inbox_cutoff)
        if self.dry_run:
            self.inbox_messages = expired.count() - self._expired_session_messages
            return False
        removed, _ = InboxMessage.objects.filter(
            message_id__in=expired.order_by("created_at").values("message_id")[: self.batch]
        ).delete()
        self.inbox_messages += removed
        return removed >= self.batch


def prune(*, now: datetime, dry_run: bool = False, on_loop: Callable[[LoopPruned], None] | None = None) -> Pruner:
    """Apply the retention rules now, exactly (no headroom), in bounded batches."""
    return Pruner(now=now, dry_run=dry_run, on_loop=on_loop).run()
